#!/usr/bin/env bash
# examples/deploy/slurm/atoll.sbatch with islands, on a real one-host Slurm
# cluster: the syncer on its own step, then two learner tasks, each an island
# (ATOLL_ISLAND_SIZE=2): atoll-node runs torchrun over 2 ranks of
# tests/python/island_rank.py (DDP on the CPU, gloo), which join over TLS as
# one learner each. Rank 1 of island 0 is killed with kill -9 once both
# islands were merged: its torchrun starts the island again, which comes back
# under the same id and is merged again while island 1 trained on. The test
# then ends the run (SIGTERM to the syncer: an orderly end), and the job ends
# with exit 0: each island one learner whose batch is both ranks', one restart
# of learner 0 with its re-integration time, no departure, no version lost.
# Usage: slurm_island_test.sh ATOLL REPO SCRATCH PYTHON_DIR
#   (PYTHON_DIR: the build's python/, holding the atoll package; exit 77: no
#   Slurm, not root, or no torch for /usr/bin/python3)
set -euo pipefail
atoll=$(realpath "$1")
repo=$(realpath "$2")
work=$3
pydir=$(realpath "$4")
for tool in munged slurmctld slurmd sbatch torchrun; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool not found (scripts/setup installs slurm-wlm, munge and python3-torch)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIPPED: the daemons run as root (SlurmUser=root), and this is not root"; exit 77; }
/usr/bin/python3 -c "import torch.distributed" 2>/dev/null ||
  { echo "SKIPPED: /usr/bin/python3 has no torch.distributed (scripts/setup installs python3-torch)"; exit 77; }
mkdir -p "$work"
work=$(realpath "$work")
source "$repo/tests/deploy/slurm_cluster.sh"
slurm_stop "$work/slurm" >/dev/null 2>&1 || true  # a run that CTest killed at its timeout may have left them
rm -rf "$work"
mkdir -p "$work"
overall=$((SECONDS + 480))  # every wait below is bounded by this too, under CTest's 600 s
trap 'slurm_stop "$work/slurm" || echo "WARNING: a daemon survived" >&2' EXIT

source "$repo/tests/deploy/slurm_job.sh"  # die, wait_log
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

slurm_start "$work/slurm" 8 || die "the Slurm cluster did not start"
echo "slurm: up on node $SLURM_CLUSTER_NODE"

# The run: the tiny MLP the island test trains, an external model; a budget no run reaches: the test ends it.
shared="$work/shared"
mkdir -p "$shared/islands"
PYTHONPATH="$pydir:$repo/tests/python" /usr/bin/python3 -c \
  "import sys, atoll; from conftest import tiny_model; atoll.save_model(tiny_model(), sys.argv[1], 'mlp 8-16-3')" \
  "$shared/tiny.atoll" || die "could not write the model file"
cat >"$shared/topology.toml" <<TOML
mode = "decoupled"
tokens = 1000000000000
[model]
kind = "external"
path = "$shared/tiny.atoll"
[outer]
fragments = 2
sync_every = 4
[checkpoint]
every_seconds = 2
[[learners]]
[[learners]]
TOML

port=$(free_port)
job=$(cd "$work" && ATOLL_SHARED="$shared" ATOLL_TOPOLOGY="$shared/topology.toml" ATOLL_PORT=$port ATOLL_BIN="$atoll" \
  ATOLL_NODE="$repo/examples/deploy/atoll-node" ATOLL_ISLAND_SIZE=2 ATOLL_ISLAND_PORT=$(free_port) \
  ATOLL_ISLAND_SCRIPT="$repo/tests/python/island_rank.py --mode ddp --out $shared/islands --timeout 10 --pause 0.01" \
  PYTHONPATH="$pydir" OMP_NUM_THREADS=1 ATOLL_ARGS=-v \
  sbatch --parsable --ntasks=3 --time=10 "$repo/examples/deploy/slurm/atoll.sbatch") || die "sbatch refused the job"
echo "slurm: submitted job $job"
syncer_log="$shared/logs/syncer-$job.log"
for id in 0 1; do wait_log "$syncer_log" "learner $id registered" 180; done
grep -q "plain TCP" "$syncer_log" && die "the syncer runs without TLS"
wait_log "$syncer_log" "rounds [1-9]" 60

# Rank 1 of island 0, once it trained a while: it says its pid with each step.
ranks="$shared/islands/island-0-rank-1.jsonl"
deadline=$((SECONDS + 60))
until [ "$(grep -c '"step"' "$ranks" 2>/dev/null || echo 0)" -gt 30 ]; do
  ((SECONDS < deadline)) || die "island 0's rank 1 did not take 30 steps within 60 s"
  sleep 0.5
done
victim=$(tail -n 2 "$ranks" | grep -o '"pid": [0-9]*' | tail -n 1 | grep -o '[0-9]*$')
[ -n "$victim" ] || die "island 0's rank 1 named no pid"
kill -9 "$victim"
echo "slurm: killed island 0's rank 1 (pid $victim)"
wait_log "$syncer_log" "learner 0 registered" 120 2
wait_log "$syncer_log" "learner 0 is merged again" 120
grep -o "learner 0 is merged again, [0-9.]* s after it came back" "$syncer_log" | head -n 1
# torchrun sees a rank fail: the killed one (-9), or the other, whose collective failed first (1).
grep -q "failed (exitcode: -\?[19]) local_rank: [01]" "$shared/logs/learner-$job-0.log" ||
  die "island 0's torchrun did not see a rank fail"

# The run's end, as an engine would ask for it: the syncer ends it in order and tells the islands.
syncer_pid=$(pgrep -f -- "syncer .*--listen 0\.0\.0\.0:$port( |$)" | head -n 1) || true
[ -n "$syncer_pid" ] || die "no syncer process"
kill -TERM "$syncer_pid"
state=$(slurm_wait_job "$job" $((overall - SECONDS > 0 ? overall - SECONDS : 1))) || die "job $job did not complete with exit 0: $state"
echo "slurm: $state"
report="$shared/report-$job.json"
[ -f "$report" ] || die "no report at $report"
python3 - "$report" <<'PY' || die "an invariant broke (above)"
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
learners = {l["id"]: l for l in r["per_learner"]}
if r["version_decreases"]: problems.append(f"{r['version_decreases']} global version decreases")
if any(f < a for f, a in zip(r["final_versions"], r["max_adopted_versions"])):
    problems.append(f"final versions {r['final_versions']} behind adopted {r['max_adopted_versions']}")
if r["departures"] or r["joins"]: problems.append(f"{r['departures']} departures, {r['joins']} joins")
if r["restarts"] != 1 or learners[0]["restarts"] != 1 or learners[1]["restarts"] != 0:
    problems.append(f"restarts {r['restarts']} ({[l['restarts'] for l in r['per_learner']]}): expected island 0's one")
if len(r["reintegration_seconds"]) != 1: problems.append(f"re-integrations {r['reintegration_seconds']}")
for i, l in learners.items():
    if l["batch_size"] != 32: problems.append(f"island {i}: batch {l['batch_size']}, not both ranks' 16 + 16")
    if l["merged"] <= 0: problems.append(f"island {i} was never merged")
for p in problems: print("invariant:", p)
print(f"report: {r['tokens']} tokens, {r['rounds']} rounds, island 0 re-integrated in "
      f"{r['reintegration_seconds']} s, merged {[l['merged'] for l in r['per_learner']]}")
sys.exit(1 if problems else 0)
PY
for id in 0 1; do
  grep -q "the run is over" "$shared/logs/learner-$job-$id.log" || die "island $id was not told the run is over"
done
slurm_stop "$work/slurm" || die "a daemon survived slurm_stop"
trap - EXIT
left=$(pgrep -f -- "$work/(shared|slurm)" || true)
[ -z "$left" ] || die "processes left behind: $left"
echo "slurm_island_test: ok"
