# Helpers for the multi-process tests: real `atoll` processes on loopback.
# Every wait is bounded; a failed expectation prints the logs and exits 1.
# Usage (from a test): source lib.sh ATOLL_BINARY SCRATCH_DIR
set -euo pipefail
atoll=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
export ATOLL_TOKEN="atoll-test-token-0123456789abcdef"
pids=()
port=""

# ATOLL_TEST_TLS=1: every syncer and learner of the test over TLS 1.3, with
# certificates from `atoll certs` (the same test, the other transport).
syncer_net=()
learner_net=()
if [[ "${ATOLL_TEST_TLS:-0}" == 1 ]]; then
  "$atoll" certs "$work/pki" >/dev/null || { echo "FAILED: atoll certs" >&2; exit 1; }
  syncer_net=(--tls-cert "$work/pki/syncer.pem" --tls-key "$work/pki/syncer.key" --tls-ca "$work/pki/ca.pem")
  learner_net=(--tls-cert "$work/pki/learner.pem" --tls-key "$work/pki/learner.key" --tls-ca "$work/pki/ca.pem")
fi

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

die() {
  echo "FAILED: $*" >&2
  for f in "$work"/*.log; do
    echo "---- $f (last 25 lines)" >&2
    tail -n 25 "$f" >&2 || true
  done
  exit 1
}

# The small run of every process test (tests/process/topology.sh): two slow learners, no checkpoints.
source "$(dirname "${BASH_SOURCE[0]}")/topology.sh"
write_topology() {  # FILE TOKENS [extra toml...]
  synthetic_topology "$1" "$2" 2 0.05 "" "${@:3}"
}

# start_syncer NAME ARGS...: starts `atoll syncer ARGS --port-file`, waits until it listens, sets $port.
start_syncer() {
  local name=$1
  shift
  rm -f "$work/port"
  "$atoll" syncer "$@" "${syncer_net[@]}" --port-file "$work/port" -q -v >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
  for _ in $(seq 300); do
    [[ -s "$work/port" ]] && break
    kill -0 "$!" 2>/dev/null || die "$name ended before listening"
    sleep 0.1
  done
  [[ -s "$work/port" ]] || die "$name did not listen within 30 s"
  port=$(cat "$work/port")
}

# start_learner NAME ID [ARGS...]
start_learner() {
  local name=$1 id=$2
  shift 2
  "$atoll" learner --join "127.0.0.1:$port" --id "$id" -v --threads 1 "${learner_net[@]}" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}

# peak_rss_kb PID: the process's peak resident set (VmHWM), in KiB.
peak_rss_kb() {
  awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"
}

# wait_for NAME PATTERN SECONDS [COUNT]: until NAME's log has COUNT (default 1) lines matching PATTERN.
wait_for() {
  local name=$1 pattern=$2 seconds=$3 count=${4:-1}
  local tries=$((seconds * 10))
  for _ in $(seq "$tries"); do
    (($(grep -c -E -- "$pattern" "$work/$name.log" || true) >= count)) && return 0
    sleep 0.1
  done
  die "$name: no $count line(s) matching '$pattern' within $seconds s"
}

# wait_exit PID SECONDS: waits for PID (a child of this shell), which must end
# within SECONDS; its exit status goes to $exit_status. (Not in $(...): a
# subshell cannot wait for its parent's children.)
wait_exit() {
  local pid=$1 seconds=$2
  for _ in $(seq $((seconds * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      exit_status=0
      wait "$pid" || exit_status=$?
      return 0
    fi
    sleep 0.1
  done
  die "process $pid did not end within $seconds s"
}

# expect_exit PID SECONDS STATUS WHAT: wait_exit, then the status must be STATUS.
expect_exit() {
  wait_exit "$1" "$2"
  ((exit_status == $3)) || die "$4 exited with $exit_status, not $3"
}

# json_array FILE KEY: the numbers of the first "KEY":[...] in a report, space-separated.
json_array() {
  grep -o "\"$2\":\[[0-9,]*\]" "$1" | head -n 1 | sed 's/.*\[//; s/\]//' | tr ',' ' '
}

# learner_json FILE ID: learner ID's object in a report's per_learner list.
learner_json() {
  grep -o "{\"id\":$2,[^}]*}" "$1" | head -n 1
}

# stop_run PID: ends a syncer's run the way Ctrl-C does; it tells the learners.
stop_run() {
  kill -TERM "$1"
}

# json_number FILE KEY: the first "KEY":number in a report.
json_number() {
  grep -o "\"$2\":[0-9.e+-]*" "${1:--}" | head -n 1 | cut -d: -f2
}
