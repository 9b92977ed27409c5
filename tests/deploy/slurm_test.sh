#!/usr/bin/env bash
# examples/deploy/slurm/atoll.sbatch on a real one-host Slurm cluster
# (munged, slurmctld, slurmd from Debian's packages, in a scratch folder):
# a syncer and 3 learner tasks over TLS; learner 1's process is killed with
# kill -9 mid-run; its task's atoll-node relaunches it with the same id, it is
# merged again, and the job ends by its time limit with exit 0 and every
# invariant held. Every daemon started is stopped, also on failure.
# Usage: slurm_test.sh ATOLL REPO SCRATCH   (exit 77: no Slurm installed)
set -euo pipefail
atoll=$(realpath "$1")
repo=$(realpath "$2")
work=$3
for tool in munged slurmctld slurmd sbatch; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool not found (scripts/setup installs slurm-wlm and munge)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIPPED: the daemons run as root (SlurmUser=root), and this is not root"; exit 77; }
mkdir -p "$work"
work=$(realpath "$work")
source "$repo/tests/deploy/slurm_cluster.sh"
# A run that CTest killed at its timeout (SIGKILL: no trap) may have left its daemons.
slurm_stop "$work/slurm" >/dev/null 2>&1 || true
rm -rf "$work"
mkdir -p "$work"
# Every wait below is also bounded by this, under CTest's 600 s timeout, so the trap always runs.
overall=$((SECONDS + 480))
trap 'slurm_stop "$work/slurm" || echo "WARNING: a daemon survived" >&2' EXIT

die() {
  echo "FAILED: $*" >&2
  for f in "$work"/shared/logs/*.log "$work"/atoll-*.out; do
    [ -f "$f" ] && { echo "---- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}
# wait_log FILE PATTERN SECONDS [COUNT]: until PATTERN is in FILE COUNT times.
wait_log() {
  local file=$1 pattern=$2 seconds=$3 count=${4:-1}
  local deadline=$((SECONDS + seconds))
  ((deadline < overall)) || deadline=$overall
  while ((SECONDS < deadline)); do
    local seen
    seen=$(grep -c -- "$pattern" "$file" 2>/dev/null || true)
    ((${seen:-0} >= count)) && return 0
    sleep 0.5
  done
  die "no '$pattern' (x$count) in $file within $seconds s"
}

slurm_start "$work/slurm" 8 || die "the Slurm cluster did not start"
echo "slurm: up on node $SLURM_CLUSTER_NODE"

# A small run that needs no data and ends by itself after 90 s of training:
# slow learners (speed 0.05) sleep most of each step, keeping the 2 cores free.
shared="$work/shared"
mkdir -p "$shared"
cat >"$shared/topology.toml" <<'TOML'
mode = "decoupled"
seconds = 90
[model]
kind = "mlp"
hidden = [32]
[data]
kind = "synthetic"
features = 16
classes = 4
examples = 4096
[outer]
fragments = 2
sync_every = 10
[[learners]]
speed = 0.05
[[learners]]
speed = 0.05
[[learners]]
speed = 0.05
TOML

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=$(cd "$work" && ATOLL_SHARED="$shared" ATOLL_TOPOLOGY="$shared/topology.toml" ATOLL_PORT=$port ATOLL_BIN="$atoll" \
  ATOLL_NODE="$repo/examples/deploy/atoll-node" ATOLL_ARGS=-v \
  sbatch --parsable --ntasks=4 --time=10 "$repo/examples/deploy/slurm/atoll.sbatch") || die "sbatch refused the job"
echo "slurm: submitted job $job"
syncer_log="$shared/logs/syncer-$job.log"
for id in 0 1 2; do wait_log "$syncer_log" "learner $id registered" 120; done
[ "$(stat -c %a "$shared/token")" = 600 ] || die "the token file has mode $(stat -c %a "$shared/token"), not 600"
grep -q "plain TCP" "$syncer_log" && die "the syncer runs without TLS"

# Learner 1's atoll process (not its task's atoll-node), once rounds merged
# (the progress line a log gets every 10 s).
wait_log "$syncer_log" "rounds [1-9]" 60
victim=$(pgrep -f -- "learner --join [^ ]*:$port .*--id 1( |$)" | head -n 1) || true
[ -n "$victim" ] || die "no process for learner 1"
kill -9 "$victim"
echo "slurm: killed learner 1 (pid $victim)"
wait_log "$syncer_log" "learner 1 is down" 30
wait_log "$syncer_log" "learner 1 registered" 60 2
wait_log "$syncer_log" "learner 1 is merged again" 60
grep -o "learner 1 is merged again, [0-9.]* s after it came back" "$syncer_log" | head -n 1
grep -q "relaunching" "$shared/logs/learner-$job-1.log" || die "learner 1's task did not say it relaunched"

state=$(slurm_wait_job "$job" $((overall - SECONDS > 0 ? overall - SECONDS : 1))) || die "job $job did not complete with exit 0: $state"
echo "slurm: $state"
report="$shared/report-$job.json"
[ -f "$report" ] || die "no report at $report"
# What each learner process adopted, as it says when it ends: "newest adopted versions [a b]".
adopted=$(cat "$shared"/logs/learner-"$job"-*.log | grep -o "newest adopted versions \[[0-9 ]*\]" | tr -dc '0-9 \n[' | tr '[' ' ')
python3 - "$report" "$adopted" <<'PY' || die "an invariant broke (above)"
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
if r["version_decreases"] != 0: problems.append(f"{r['version_decreases']} global version decreases")
final = r["final_versions"]
# The global model is never behind what a learner adopted of it.
adopted = [max(col) for col in zip(*[list(map(int, line.split())) for line in sys.argv[2].splitlines() if line.split()])]
if len(adopted) != len(final): problems.append(f"learners' adopted versions {adopted} do not match {len(final)} fragments")
if any(a > f for f, a in zip(final, adopted)): problems.append(f"learners adopted {adopted}, beyond the final {final}")
if r["gave_up"]: problems.append(f"gave up on {r['gave_up']}")
l1 = next(l for l in r["per_learner"] if l["id"] == 1)
# Two processes for learner 1: its new one trained some of its tokens, the killed one the rest.
if not 0 < l1["last_incarnation_tokens"] < l1["tokens"]:
    problems.append(f"learner 1: {l1['last_incarnation_tokens']} of its {l1['tokens']} tokens since its last start")
for l in r["per_learner"]:
    if l["tokens"] <= 0: problems.append(f"learner {l['id']} trained nothing")
for p in problems: print("invariant:", p)
print(f"report: {r['tokens']} tokens, final versions {final}, adopted at most {adopted}; learner 1 trained "
      f"{l1['last_incarnation_tokens']} of its {l1['tokens']} tokens in its relaunched process")
sys.exit(1 if problems else 0)
PY
for id in 0 1 2; do
  grep -q "the run is over" "$shared/logs/learner-$job-$id.log" || die "learner $id was not told the run is over"
done
slurm_stop "$work/slurm" || die "a daemon survived slurm_stop"
trap - EXIT
left=$(pgrep -f -- "$work/(shared|slurm)" || true)
[ -z "$left" ] || die "processes left behind: $left"
echo "slurm_test: ok"
