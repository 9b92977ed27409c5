#!/usr/bin/env bash
# The node command's logic (examples/deploy/atoll-node), the container's
# entrypoint and the Slurm tasks' command: what it runs from the environment,
# what it refuses, and when it relaunches atoll. A stand-in for atoll records
# each launch and exits as told, so every case is exact and quick.
# Usage: atoll_node_test.sh REPO SCRATCH
set -euo pipefail
repo=$1
work=$2
node="$repo/examples/deploy/atoll-node"
rm -rf "$work"
mkdir -p "$work"
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAILED: $*" >&2; fails=$((fails + 1)); }

# The stand-in: each launch appends its arguments to launches.log and takes
# the next line of exits.txt: a status, "kill" (SIGKILL itself), or "term"
# (wait for SIGTERM, then exit 0, as atoll stops in order).
cat >"$work/fake-atoll" <<'FAKE'
#!/usr/bin/env bash
dir=$(dirname "$0")
echo "$*" >>"$dir/launches.log"
next=$(head -n 1 "$dir/exits.txt"); sed -i 1d "$dir/exits.txt"
case "$next" in
  kill) kill -9 $$ ;;
  term) trap 'exit 0' TERM; echo waiting >"$dir/waiting"; while :; do sleep 0.1; done ;;
  *) exit "$next" ;;
esac
FAKE
chmod +x "$work/fake-atoll"
printf 'atoll-test-token-0123456789abcdef\n' >"$work/token"
chmod 600 "$work/token"
"$repo/examples/deploy/atoll-node" --help | grep -q ATOLL_TOKEN_FILE || bad "--help does not list ATOLL_TOKEN_FILE"

clean_env() {
  env -i PATH="$PATH" HOME="$HOME" ATOLL_BIN="$work/fake-atoll" ATOLL_TOKEN_FILE="$work/token" "$@"
}
# expect_refusal STATUS PATTERN VAR=VALUE...: the node refuses with STATUS, saying PATTERN.
expect_refusal() {
  local want=$1 pattern=$2
  shift 2
  local out status=0
  out=$(clean_env "$@" "$node" --dry-run 2>&1) || status=$?
  if [ "$status" = "$want" ] && grep -q -- "$pattern" <<<"$out"; then ok "refused ($pattern)"
  else bad "expected exit $want saying '$pattern', got $status: $out"; fi
}
expect_refusal 2 "ATOLL_ROLE is not set" ATOLL_SYNCER=h:7070
expect_refusal 2 "expected syncer or learner" ATOLL_ROLE=leader ATOLL_SYNCER=h:7070
expect_refusal 2 "expected HOST:PORT" ATOLL_ROLE=learner ATOLL_SYNCER=h
expect_refusal 2 "ATOLL_TOKEN_FILE is not set" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_TOKEN_FILE=
chmod 644 "$work/token"
expect_refusal 2 "has mode 644" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070
chmod 600 "$work/token"
mkdir -p "$work/tls"
expect_refusal 2 "no readable ca.pem" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_TLS_DIR="$work/tls"
expect_refusal 2 "expected i/S" ATOLL_ROLE=syncer ATOLL_SYNCER=h:7070 ATOLL_SHARD=1
expect_refusal 2 "names 1 address" ATOLL_ROLE=syncer ATOLL_SYNCER=h:7070 ATOLL_SHARD=1/2
expect_refusal 2 "not a number" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 SLURM_PROCID=x
expect_refusal 2 "expected exit or wait" ATOLL_ROLE=syncer ATOLL_SYNCER=h:7070 ATOLL_AFTER_RUN=linger

# expect_command WANT VAR=VALUE...: the dry run's command line, words joined by spaces.
expect_command() {
  local want=$1
  shift
  local got
  got=$(clean_env "$@" "$node" --dry-run | tr '\n' ' ' | sed 's/ $//')
  got=${got//$work/W}
  if [ "$got" = "$want" ]; then ok "$want"; else bad "expected: $want"$'\n'"     got: $got"; fi
}
touch "$work/tls/ca.pem" "$work/tls/syncer.pem" "$work/tls/syncer.key" "$work/tls/learner.pem" "$work/tls/learner.key"
expect_command "W/fake-atoll syncer topo.toml --listen 0.0.0.0:7070 --token-file W/token --run-name atoll-42 --set checkpoint.dir=/ck --set outer.sync_every=20 --set tokens=5 --report /r.json --tls-cert W/tls/syncer.pem --tls-key W/tls/syncer.key --tls-ca W/tls/ca.pem --metrics 0.0.0.0:9464 --metrics-public -v" \
  ATOLL_ROLE=syncer ATOLL_SYNCER=node1:7070 SLURM_JOB_ID=42 ATOLL_TOPOLOGY=topo.toml ATOLL_CHECKPOINT_DIR=/ck \
  ATOLL_SET="outer.sync_every=20 tokens=5" ATOLL_REPORT=/r.json ATOLL_TLS_DIR="$work/tls" ATOLL_METRICS=0.0.0.0:9464 \
  ATOLL_METRICS_PUBLIC=1 ATOLL_ARGS=-v
expect_command "W/fake-atoll syncer --listen 0.0.0.0:7071 --token-file W/token --run-name atoll-run --shard 1/2 --on-signal pause" \
  ATOLL_ROLE=syncer ATOLL_SYNCER=a:7070,b:7071 ATOLL_SHARD=1/2 ATOLL_ON_SIGNAL=pause
expect_command "W/fake-atoll learner --join a:7070,b:7071 --token-file W/token --id 5 --give-up 300" \
  ATOLL_ROLE=learner ATOLL_SYNCER=a:7070,b:7071 JOB_COMPLETION_INDEX=5 SLURM_PROCID=9 ATOLL_GIVE_UP=300
expect_command "W/fake-atoll learner --join h:7070 --token-file W/token --id 4 --tls-cert W/tls/learner.pem --tls-key W/tls/learner.key --tls-ca W/tls/ca.pem" \
  ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 SLURM_PROCID=2 ATOLL_ID_OFFSET=2 ATOLL_TLS_DIR="$work/tls"
expect_command "W/fake-atoll learner --join h:7070 --token-file W/token --id 0 --leave-status 75" \
  ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 JOB_COMPLETION_INDEX=0 ATOLL_LEAVE_STATUS=75
expect_command "W/fake-atoll learner --join h:7070 --token-file W/token --id 7" \
  ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_LEARNER_ID=7 SLURM_PROCID=2
expect_command "W/fake-atoll learner --join h:7070 --token-file W/token" \
  ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_LEARNER_ID=open SLURM_PROCID=2
# An island: torchrun over its ranks, each running the script; its rendezvous port apart from the node's others.
touch "$work/train.py"
expect_command "torchrun --nnodes 1 --nproc_per_node 4 --max_restarts 5 --monitor_interval 1 --redirects 2 --tee 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:29402 --rdzv_id atoll-island-3-29402 W/train.py --lr 3e-3" \
  ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 SLURM_PROCID=3 SLURM_LOCALID=2 ATOLL_ISLAND_SIZE=4 \
  ATOLL_ISLAND_SCRIPT="$work/train.py --lr 3e-3" ATOLL_ISLAND_RESTARTS=5
expect_refusal 2 "ATOLL_ISLAND_SIZE='0': expected a count of ranks" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_ISLAND_SIZE=0
expect_refusal 2 "ATOLL_ISLAND_SCRIPT is not" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_ISLAND_SIZE=2
expect_refusal 2 "cannot read /nonexistent.py" ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_ISLAND_SIZE=2 \
  ATOLL_ISLAND_SCRIPT=/nonexistent.py
got=$(clean_env ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_ISLAND_SIZE=2 ATOLL_ISLAND_SCRIPT="$work/train.py" \
      ATOLL_ARGS=-v "$node" --dry-run -- -v 2>&1) && bad "flags after -- taken by an island: $got" ||
  { [[ "$got" == *"mean nothing to an island"* ]] && ok "an island refuses flags for atoll after --" ||
    bad "an island with flags after --: $got"; }
got=$(clean_env ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_ISLAND_SIZE=2 ATOLL_ISLAND_SCRIPT="$work/train.py" \
      ATOLL_ARGS=-v "$node" --dry-run | tail -n 1)
[ "$got" = "$work/train.py" ] && ok "an island leaves ATOLL_ARGS (a job's, for every node) alone" ||
  bad "an island with ATOLL_ARGS: its command ends with '$got'"
# What the script reads from the environment: the node exports it to torchrun, and torchrun to the ranks.
printf '#!/bin/sh\necho "$ATOLL_SYNCER|$ATOLL_LEARNER_ID|$ATOLL_TOKEN_FILE|$*"\n' >"$work/torchrun"
chmod +x "$work/torchrun"
got=$(clean_env ATOLL_ROLE=learner ATOLL_SYNCER=a:1,b:2 JOB_COMPLETION_INDEX=6 ATOLL_ISLAND_SIZE=2 \
      ATOLL_ISLAND_SCRIPT="$work/train.py" ATOLL_TORCHRUN="$work/torchrun" "$node")
[[ "$got" == "a:1,b:2|6|$work/token|"*"--nproc_per_node 2"*"$work/train.py" ]] &&
  ok "an island's ranks read the syncer, their id and the token" || bad "an island's environment: got '$got'"
got=$(clean_env ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 SLURM_PROCID=1 "$node" --dry-run -- --threads 1 | tail -n 2 | tr '\n' ' ')
[ "$got" = "--threads 1 " ] && ok "flags after -- go to atoll" || bad "flags after --: got '$got'"

# expect_launches EXITS STATUS LAUNCHES VAR=VALUE...: run the node for real
# with the stand-in exiting as EXITS (comma-separated) says.
expect_launches() {
  local exits=$1 want=$2 launches=$3
  shift 3
  tr , '\n' <<<"$exits" >"$work/exits.txt"
  rm -f "$work/launches.log"
  local status=0
  timeout 60 env -i PATH="$PATH" HOME="$HOME" ATOLL_BIN="$work/fake-atoll" ATOLL_TOKEN_FILE="$work/token" \
    ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 "$@" "$node" 2>"$work/node.err" || status=$?
  local got
  got=$(wc -l <"$work/launches.log")
  if [ "$status" = "$want" ] && [ "$got" = "$launches" ]; then ok "exits $exits: node exits $status after $got launch(es)"
  else bad "exits $exits: expected status $want after $launches launch(es), got $status after $got"; cat "$work/node.err" >&2; fi
}
expect_launches 0 0 1                                 # no relaunching: atoll's own status
expect_launches 75 75 1
expect_launches 75,kill,1,0 0 4 ATOLL_RESTARTS=5      # lost syncer, kill -9, failure: relaunched
expect_launches 75,75,75 75 2 ATOLL_RESTARTS=1        # restarts spent: the last status
expect_launches 77,0 77 1 ATOLL_RESTARTS=5            # refused: never again
grep -q "atoll exited 77: restarting cannot help" "$work/node.err" && ok "a refusal says why it ends" ||
  bad "a refusal does not say why it ends: $(cat "$work/node.err")"
expect_launches 2,0 2 1 ATOLL_RESTARTS=5              # bad configuration: never again

# SIGTERM reaches atoll, which stops in order; the node ends with it and does not relaunch.
echo term >"$work/exits.txt"
rm -f "$work/launches.log" "$work/waiting"
env -i PATH="$PATH" HOME="$HOME" ATOLL_BIN="$work/fake-atoll" ATOLL_TOKEN_FILE="$work/token" ATOLL_ROLE=learner \
  ATOLL_SYNCER=h:7070 ATOLL_RESTARTS=5 "$node" 2>"$work/node.err" &
pid=$!
for _ in $(seq 100); do [ -f "$work/waiting" ] && break; sleep 0.1; done
kill -TERM "$pid"
status=0
timeout 20 tail --pid="$pid" -f /dev/null || bad "the node did not end after SIGTERM"
wait "$pid" || status=$?
[ "$status" = 0 ] && [ "$(wc -l <"$work/launches.log")" = 1 ] && ok "SIGTERM: atoll stopped in order, no relaunch" ||
  bad "SIGTERM: status $status, $(wc -l <"$work/launches.log") launches"

# ATOLL_AFTER_RUN=wait: atoll itself notes the end and stays up idle (atoll syncer --after-run wait,
# tested with the real atoll by tests/process/probes_test.sh); the node passes it on, for the syncer.
out=$(clean_env ATOLL_ROLE=syncer ATOLL_SYNCER=h:7070 ATOLL_AFTER_RUN=wait "$node" --dry-run)
grep -qx -- --after-run <<<"$out" && [ "$(grep -A1 -x -- --after-run <<<"$out" | tail -n 1)" = wait ] &&
  ok "ATOLL_AFTER_RUN=wait: atoll syncer --after-run wait" || bad "ATOLL_AFTER_RUN=wait not passed on: $out"
out=$(clean_env ATOLL_ROLE=learner ATOLL_SYNCER=h:7070 ATOLL_AFTER_RUN=wait "$node" --dry-run)
grep -q -- --after-run <<<"$out" && bad "a learner got --after-run: $out" || ok "ATOLL_AFTER_RUN is the syncer's alone"

# --probe: an engine's exec probe asks atoll's status server (here a stand-in
# that is alive and not ready).
python3 - "$work/probe-port" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/healthz"
        body = (b"alive\n" if ok else b"the syncer is restoring its checkpoint\n")
        self.send_response(200 if ok else 503); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_port)); __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
s.timeout = 30
for _ in range(2): s.handle_request()
PY
server=$!
for _ in $(seq 100); do [ -f "$work/probe-port" ] && break; sleep 0.1; done
probe() {  # PATH [VAR=VALUE...]: the probe's status and its line
  local path=$1
  shift
  local out status=0
  out=$(clean_env ATOLL_ROLE=syncer ATOLL_SYNCER=h:7070 ATOLL_METRICS="127.0.0.1:$(cat "$work/probe-port")" "$@" \
    "$node" --probe "$path" 2>&1) || status=$?
  echo "$status $out"
}
got=$(probe /healthz)
[ "$got" = "0 alive" ] && ok "--probe /healthz: $got" || bad "--probe /healthz: $got"
got=$(probe /readyz)
[ "$got" = "1 the syncer is restoring its checkpoint" ] && ok "--probe /readyz: $got" || bad "--probe /readyz: $got"
wait "$server" || true
got=$(probe /healthz)
[[ "$got" == "1 nothing answers on port"* ]] && ok "--probe with nothing there: $got" || bad "--probe with nothing there: $got"

[ "$fails" = 0 ] || { echo "atoll_node_test: $fails case(s) failed" >&2; exit 1; }
echo "atoll_node_test: ok"
