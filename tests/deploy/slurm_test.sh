#!/usr/bin/env bash
# examples/deploy/slurm/atoll.sbatch on a real one-host Slurm cluster
# (munged, slurmctld, slurmd from Debian's packages, in a scratch folder):
# a syncer in 2 shards (syncer.shards = 2: two srun steps, one port each) and
# 3 learner tasks joining both, over TLS. Learner 1's process is killed with
# kill -9 mid-run; its task's atoll-node relaunches it with the same id and it
# is merged again. Then shard 1's process is killed with kill -9 once it wrote
# a checkpoint; its task's atoll-node relaunches it with the same run name, it
# restores that checkpoint, the learners register with it again and it merges
# on, while shard 0 merged throughout. Then the test ends the run at shard 0
# (SIGINT: an orderly end; the learners pass it on to shard 1), and the
# job ends with exit 0 and every invariant held, per shard: each owns its fragment alone, no
# global version went down, none is behind what a learner adopted. Every
# daemon started is stopped, also on failure.
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

source "$repo/tests/deploy/slurm_job.sh"  # die, wait_log

slurm_start "$work/slurm" 8 || die "the Slurm cluster did not start"
echo "slurm: up on node $SLURM_CLUSTER_NODE"

# A small run that needs no data, its syncer in 2 shards (shard i owns fragment
# i), a checkpoint every 2 s, and a budget no run reaches: the test ends the run
# once it saw what it waits for, however fast or slow the machine (a budget
# raced the kills, and a restarted shard, which counts its own tokens, could
# miss the end shard 0 reached). Slow learners (speed 0.05) sleep most of each
# step, keeping the 2 cores free.
shared="$work/shared"
mkdir -p "$shared"
cat >"$shared/topology.toml" <<'TOML'
mode = "decoupled"
tokens = 1000000000000
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
[syncer]
shards = 2
[checkpoint]
every_seconds = 2
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
  sbatch --parsable --ntasks=5 --time=10 "$repo/examples/deploy/slurm/atoll.sbatch") || die "sbatch refused the job"
echo "slurm: submitted job $job"
shard_log=("$shared/logs/syncer-$job-shard-0.log" "$shared/logs/syncer-$job-shard-1.log")
for log in "${shard_log[@]}"; do
  for id in 0 1 2; do wait_log "$log" "learner $id registered" 120; done
  grep -q "plain TCP" "$log" && die "a shard runs without TLS ($log)"
done
[ "$(stat -c %a "$shared/token")" = 600 ] || die "the token file has mode $(stat -c %a "$shared/token"), not 600"
syncer_log=${shard_log[0]}  # shard 0 runs throughout

# Learner 1's atoll process (not its task's atoll-node), once rounds merged
# (the progress line a log gets every 10 s).
wait_log "$syncer_log" "rounds [1-9]" 60
victim=$(pgrep -f -- "learner --join [^ ]*:$port[ ,].*--id 1( |$)" | head -n 1) || true
[ -n "$victim" ] || die "no process for learner 1"
kill -9 "$victim"
echo "slurm: killed learner 1 (pid $victim)"
wait_log "$syncer_log" "learner 1 is down" 30
wait_log "$syncer_log" "learner 1 registered" 60 2
wait_log "$syncer_log" "learner 1 is merged again" 60
grep -o "learner 1 is merged again, [0-9.]* s after it came back" "$syncer_log" | head -n 1
grep -q "relaunching" "$shared/logs/learner-$job-1.log" || die "learner 1's task did not say it relaunched"

# Shard 1's atoll process (at port + 1), once it wrote a checkpoint of its fragment.
shard1_log=${shard_log[1]}
wait_log "$shard1_log" "checkpointer shard 1: wrote" 60
victim=$(pgrep -f -- "syncer .*--listen 0\.0\.0\.0:$((port + 1)) .*--shard 1/2( |$)" | head -n 1) || true
[ -n "$victim" ] || die "no process for shard 1"
merged0=$(grep -c "checkpointer: wrote" "$syncer_log" || true)
wrote1=$(grep -c "checkpointer shard 1: wrote" "$shard1_log" || true)  # both processes write to this log
kill -9 "$victim"
echo "slurm: killed shard 1 (pid $victim)"
wait_log "$shard1_log" "relaunching" 30
wait_log "$shard1_log" "restored checkpoint" 60
for id in 0 1 2; do wait_log "$shard1_log" "learner $id registered" 60 $((id == 1 ? 3 : 2)); done
# The relaunched shard merges on: three checkpoints of its own (each after new rounds, every 2 s), so that
# every learner was merged by it before the test ends the run (its report counts what it merged).
wait_log "$shard1_log" "checkpointer shard 1: wrote" 60 $((wrote1 + 3))
grep -o "restored checkpoint.*" "$shard1_log" | head -n 1
# Shard 0 merged on meanwhile (it writes a checkpoint only after new rounds).
wait_log "$syncer_log" "checkpointer: wrote" 30 $((merged0 + 1))

# The end of the run, in order, by shard 0 alone: its atoll (not its node, which would relaunch a failed
# one) gets SIGINT and tells every learner the run is over; the learners pass that on to shard 1 (the
# restarted one, with its own count), which ends the run too; each writes its report and every task exits 0.
shard0=$(pgrep -f -- "syncer .*--listen 0\.0\.0\.0:$port .*--shard 0/2( |$)" || true)
(($(wc -w <<<"$shard0") == 1)) || die "expected shard 0's process, found: $shard0"
kill -INT $shard0
wait_log "$shard1_log" "ending it here too" 60

state=$(slurm_wait_job "$job" $((overall - SECONDS > 0 ? overall - SECONDS : 1))) || die "job $job did not complete with exit 0: $state"
echo "slurm: $state"
reports=("$shared/report-$job-shard-0.json" "$shared/report-$job-shard-1.json")
for r in "${reports[@]}"; do [ -f "$r" ] || die "no report at $r"; done
# What each learner process adopted, as it says when it ends: "newest adopted versions [a b]".
adopted=$(cat "$shared"/logs/learner-"$job"-*.log | grep -o "newest adopted versions \[[0-9 ]*\]" | tr -dc '0-9 \n[' | tr '[' ' ')
python3 - "$adopted" "${reports[@]}" <<'PY' || die "an invariant broke (above)"
import json, sys
adopted_lines, paths = sys.argv[1], sys.argv[2:]
reports = [json.load(open(p)) for p in paths]
problems = []
# The learners' newest adopted version of each fragment, over all their processes.
adopted = [max(col) for col in zip(*[list(map(int, line.split())) for line in adopted_lines.splitlines() if line.split()])]
for shard, r in enumerate(reports):
    name = f"shard {shard}"
    if r["version_decreases"] != 0: problems.append(f"{name}: {r['version_decreases']} global version decreases")
    if r["gave_up"]: problems.append(f"{name}: gave up on {r['gave_up']}")
    final = r["final_versions"]
    if len(adopted) != len(final): problems.append(f"learners' adopted versions {adopted} do not match {len(final)} fragments")
    # Shard i owns fragment i: it alone merged it, and is never behind what a learner adopted of it.
    for p, v in enumerate(final):
        if p % len(reports) != shard and v != 0: problems.append(f"{name} merged fragment {p}, another shard's")
    if shard < len(adopted) and final[shard] < adopted[shard]:
        problems.append(f"fragment {shard}: learners adopted version {adopted[shard]}, {name} ended at {final[shard]}")
    for l in r["per_learner"]:
        if l["merged"] <= 0: problems.append(f"{name} merged nothing of learner {l['id']}")
        if l["tokens"] <= 0: problems.append(f"{name}: learner {l['id']} trained nothing")
# Two processes for learner 1: its new one trained some of its tokens, the killed one the rest (as shard 0,
# which ran throughout, counts them).
l1 = next(l for l in reports[0]["per_learner"] if l["id"] == 1)
if not 0 < l1["last_incarnation_tokens"] < l1["tokens"]:
    problems.append(f"learner 1: {l1['last_incarnation_tokens']} of its {l1['tokens']} tokens since its last start")
for p in problems: print("invariant:", p)
print(f"reports: final versions {[r['final_versions'] for r in reports]} (shard 0, shard 1), adopted at most "
      f"{adopted}; learner 1 trained {l1['last_incarnation_tokens']} of its {l1['tokens']} tokens in its relaunched "
      f"process")
sys.exit(1 if problems else 0)
PY
grep -q "syncer: the run was stopped" "$syncer_log" || die "$syncer_log: shard 0 did not end the run on SIGINT"
grep -q "syncer shard 1: syncer shard 0 ended the run: the run was stopped" "$shard1_log" ||
  die "$shard1_log: shard 1 did not end the run as shard 0 did"
for id in 0 1 2; do
  grep -q "the run is over" "$shared/logs/learner-$job-$id.log" || die "learner $id was not told the run is over"
done
# One model of the run, put together from both shards' final checkpoints: it holds each fragment at the
# version its shard ended at, and has a held-out figure.
model_report="$shared/report-$job.json"
[ -f "$model_report" ] || die "no report of the assembled model at $model_report"
[ -s "$shared/model-$job.atoll-model" ] || die "no model file saved"
python3 - "$model_report" "${reports[@]}" <<'PY' || die "the assembled model does not match the shards (above)"
import json, math, sys
model, shards = json.load(open(sys.argv[1])), [json.load(open(p)) for p in sys.argv[2:]]
owner = [shards[p % len(shards)]["final_versions"][p] for p in range(len(model["final_versions"]))]
ok = model["final_versions"] == owner and math.isfinite(model["eval"]["loss"]) and len(model["shards"]) == 2
# The run's figures too, from both shards' (the restarted one's going on from its checkpoint's).
ok = ok and model["rounds"] == sum(s["rounds"] for s in shards) and 0 < model["goodput"] <= 1
ok = ok and model["merged_pushes"] == sum(s["merged_pushes"] for s in shards)
ok = ok and all(l["merged"] > 0 for l in model["per_learner"]) and len(model["per_learner"]) == 3
print(f"assembled model: versions {model['final_versions']} (the shards ended at {owner}), held-out loss "
      f"{model['eval']['loss']:.4f}, accuracy {model['eval']['accuracy']:.4f}; {model['rounds']} rounds, goodput "
      f"{model['goodput']:.3f}, merges per learner {[l['merged'] for l in model['per_learner']]}")
sys.exit(0 if ok else 1)
PY
slurm_stop "$work/slurm" || die "a daemon survived slurm_stop"
trap - EXIT
left=$(pgrep -f -- "$work/(shared|slurm)" || true)
[ -z "$left" ] || die "processes left behind: $left"
echo "slurm_test: ok"
