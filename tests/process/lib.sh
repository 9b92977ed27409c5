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

# start_learner NAME ID [ARGS...]: joins $join, or the last syncer started (127.0.0.1:$port).
start_learner() {
  local name=$1 id=$2
  shift 2
  "$atoll" learner --join "${join:-127.0.0.1:$port}" --id "$id" -v --threads 1 "${learner_net[@]}" "$@" \
    >"$work/$name.log" 2>&1 &
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

# free_port: a loopback port free now, for --metrics (which takes no port 0).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The --metrics server's /status.json on PORT, read with $ATOLL_TOKEN, for
# wait_status and status_value: `python3 -c "$status_py" PORT EXPRESSION
# SECONDS` waits up to SECONDS (0: one look) until EXPRESSION, Python over the
# status's fields, is true, then prints its value; past SECONDS it prints the
# last status (or why there was none) and exits 1.
status_py='
import json, os, sys, time, urllib.request
port, expression, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
request = urllib.request.Request(f"http://127.0.0.1:{port}/status.json",
                                 headers={"Authorization": "Bearer " + os.environ["ATOLL_TOKEN"]})
deadline = time.monotonic() + seconds
while True:
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            status = json.load(r)
        value = eval(expression, {}, status)
        if value or seconds == 0:
            print(value)
            sys.exit(0)
        status.pop("series", None)
        last = json.dumps(status)
    except (OSError, ValueError) as e:
        last = f"{type(e).__name__}: {e}"
    if time.monotonic() >= deadline:
        print(last)
        sys.exit(1)
    time.sleep(0.1)
'

# wait_status PORT CONDITION SECONDS: until the status on PORT makes CONDITION
# true, e.g. 'rounds >= 20' or 'all(l["merged"] > 0 for l in per_learner)'.
wait_status() {
  local last
  last=$(python3 -c "$status_py" "$1" "$2" "$3") || die "the status on port $1 did not reach '$2' within $3 s; last: $last"
}

# status_value PORT EXPRESSION: EXPRESSION over the status on PORT now (it may take 30 s to answer).
status_value() {
  wait_status "$1" True 30
  python3 -c "$status_py" "$1" "$2" 0 || die "no status on port $1"
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
