#!/usr/bin/env bash
# The status page's control, and its token across processes.
# Usage: control_test.sh ATOLL OUTDIR
# 1. A chaos run with --allow-control: POST /control kills learner 1 and
#    stalls learner 0; /metrics then shows the restart and the learner back.
# 2. --allow-control without a fault plan is refused, naming what it needs.
# 3. atoll run --processes --metrics: the data endpoints want the cluster
#    token, which is in atoll-out/cluster-token (mode 600), and accept it.
set -euo pipefail
atoll=$(realpath "$1")  # the test works inside OUTDIR
out=$2
rm -rf "$out"
mkdir -p "$out"
cd "$out"
pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true; }
trap cleanup EXIT
die() {
  echo "FAILED: $*" >&2
  for f in "$out"/*.log; do echo "---- $f" >&2; tail -n 20 "$f" >&2 || true; done
  exit 1
}
command -v curl >/dev/null || { echo "SKIPPED: curl is not installed"; exit 77; }

cat > topology.toml <<'TOML'
mode = "decoupled"
tokens = 0
seconds = 60
[model]
kind = "mlp"
hidden = [16]
[data]
kind = "synthetic"
features = 8
classes = 4
examples = 2048
[outer]
fragments = 1
sync_every = 20
[checkpoint]
dir = ""
[[learners]]
speed = 0.2
[[learners]]
speed = 0.2
[[learners]]
speed = 0.2
TOML
cat > plan.toml <<'TOML'
name = "control"
topology = "topology.toml"
seconds = 60
[[fault]]
kind = "slow"
at = 1.0
learner = 2
factor = 2
duration = 1
TOML

# Waits (bounded) until the server line appears in LOG; sets url.
await_url() {  # LOG
  url=""
  for _ in $(seq 300); do
    url=$(sed -n 's|.*status page at \(http://127.0.0.1:[0-9]*\)/.*|\1|p' "$1" | head -n 1)
    [[ -n "$url" ]] && return 0
    kill -0 "$pid" 2>/dev/null || die "atoll ended before serving"
    sleep 0.1
  done
  die "no status page within 30 s"
}
# Waits (bounded, 30 s) until /metrics has a line matching REGEX.
await_metric() {  # REGEX [curl args...]
  local regex=$1; shift
  for _ in $(seq 300); do
    curl -sf "$@" "$url/metrics" > metrics.txt 2>/dev/null || true
    grep -Eq "$regex" metrics.txt && return 0
    sleep 0.1
  done
  die "/metrics never matched $regex"
}

# 1. Control.
"$atoll" run topology.toml --faults plan.toml --metrics 127.0.0.1:0 --allow-control --threads 1 -q \
  --report control.json --tape control.jsonl > control.out 2> control.log &
pid=$!
await_url control.log
await_metric '^atoll_learner_up\{learner="1"\} 1'
code=$(curl -s -o answer.txt -w '%{http_code}' -X POST "$url/control?action=kill&learner=1")
[[ "$code" == 200 ]] || die "kill answered $code: $(cat answer.txt)"
await_metric '^atoll_learner_restarts_total\{learner="1"\} 1'
await_metric '^atoll_faults_recovered_total [1-9]'
await_metric '^atoll_learner_reintegration_seconds\{learner="1"\} [0-9]'
code=$(curl -s -o answer.txt -w '%{http_code}' -X POST "$url/control?action=stall&learner=0")
[[ "$code" == 200 ]] || die "stall answered $code: $(cat answer.txt)"
# A stall lasts 5 s. After 1.5 s, what learner 0 reported before it has
# arrived; from then to 3.5 s it takes no step (one in flight at most).
steps_of_0() { curl -sf "$url/metrics" | sed -n 's/^atoll_learner_steps_total{learner="0"} //p'; }
sleep 1.5
steps_mid=$(steps_of_0)
sleep 2
steps_late=$(steps_of_0)
(( $(printf '%.0f' "$steps_late") - $(printf '%.0f' "$steps_mid") <= 1 )) ||
  die "learner 0 kept training while stalled ($steps_mid -> $steps_late steps)"
code=$(curl -s -o answer.txt -w '%{http_code}' -X POST "$url/control?action=kill&learner=7")
[[ "$code" == 409 ]] && grep -q 'there is no learner 7' answer.txt || die "kill of learner 7 answered $code"
kill -INT "$pid"
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && die "the chaos run did not stop within 60 s of SIGINT"
pid=""
grep -q '"what":"restart","child":"learner 1"' control.jsonl || die "the tape has no restart of learner 1"
[[ -s control.learners.svg ]] || die "no plots after the chaos run"

# 2. Control needs a fault plan.
if "$atoll" run topology.toml --metrics 127.0.0.1:0 --allow-control > refused.out 2>&1; then
  die "--allow-control without --faults was accepted"
fi
grep -q -- '--allow-control needs --faults' refused.out || die "the refusal does not say what it needs"

# 3. Across processes, the token.
"$atoll" run topology.toml --processes --metrics 127.0.0.1:0 --seconds 30 -q --report processes.json \
  > processes.out 2> processes.log &
pid=$!
await_url processes.log
[[ -f atoll-out/cluster-token && $(stat -c %a atoll-out/cluster-token) == 600 ]] || die "no token file of mode 600"
for _ in $(seq 300); do curl -s -o /dev/null "$url/" && break; sleep 0.1; done
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/metrics")
[[ "$code" == 401 ]] || die "/metrics without the token answered $code, want 401"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer not-the-token-at-all-0000" "$url/status.json")
[[ "$code" == 401 ]] || die "/status.json with a wrong token answered $code, want 401"
await_metric '^atoll_learner_up\{learner="2"\} 1' -H "Authorization: Bearer $(cat atoll-out/cluster-token)"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/")
[[ "$code" == 200 ]] || die "the page itself answered $code"
kill -INT "$pid"
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && die "the processes did not stop within 60 s of SIGINT"
pid=""
echo "control_test: ok (kill and stall from the page; refused without a plan; the token across processes)"
