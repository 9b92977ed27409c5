#!/usr/bin/env bash
# A syncer in two processes (syncer.shards = 2): shard 0 holds fragment 0,
# shard 1 fragment 1. Shard 1 is killed (kill -9) after it wrote a
# checkpoint. Shard 0 keeps merging its fragment meanwhile (it writes new
# checkpoints, which it does only when it merged), the learners train on, and
# a new shard 1 on the same port restores its checkpoint, takes newer versions
# from the learners' bases, and they register with it again. The test then
# ends the run at shard 0 alone: the learners pass its Done on to shard 1,
# which ends the run too, and the learners exit 0 once both said Done. No
# version any learner adopted is lost: each fragment's owner ends at least
# at the newest version any learner adopted. `atoll assemble` then makes one
# report of the run: the model's held-out figure, and both shards' figures
# (the restarted shard's going on from its checkpoint's).
# Usage: shard_kill_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000 "[syncer]
shards = 2"  # ended by the test
sed -i "s|^dir = \"\"|dir = \"$work/ckpt\"\nevery_rounds = 4\nevery_seconds = 1|" "$work/topo.toml"
start_syncer s0 "$work/topo.toml" --listen 127.0.0.1:0 --shard 0/2 --run-name t --report "$work/s0.json"
port0=$port
start_syncer s1 "$work/topo.toml" --listen 127.0.0.1:0 --shard 1/2 --run-name t --report "$work/first.json"
port1=$port
join="127.0.0.1:$port0,127.0.0.1:$port1"  # every shard
for id in 0 1; do start_learner "l$id" "$id" --report "$work/l$id.json"; done
wait_for s0 "learner 1 registered" 60
wait_for s1 "learner 1 registered" 60
wait_for s1 "checkpointer shard 1: wrote" 60  # a checkpoint of shard 1 to restore
# Two more, 4 rounds apart: rounds merged past the first one, so the learners hold versions it
# lacks (past the newest one too, unless the kill falls right after it is written).
written=$(grep -c "checkpointer shard 1: wrote" "$work/s1.log")
wait_for s1 "checkpointer shard 1: wrote" 60 $((written + 2))
kill -9 "$s1_pid"
wait_for l0 "lost syncer shard 1" 30
wait_for l1 "lost syncer shard 1" 30
# Shard 0 merges on: it checkpoints only after new rounds.
written=$(grep -c "checkpointer: wrote" "$work/s0.log" || true)
wait_for s0 "checkpointer: wrote" 30 $((written + 2))

start_syncer s1b "$work/topo.toml" --listen "127.0.0.1:$port1" --shard 1/2 --run-name t --report "$work/s1.json"
wait_for s1b "restored checkpoint" 30
wait_for l0 "connected to the syncer shard 1" 60 2
wait_for l1 "connected to the syncer shard 1" 60 2
wait_for s1b "checkpointer shard 1: wrote" 60 3  # a few rounds with the restarted shard
# The end of the run is shard 0's: the learners pass it on to shard 1 (restarted, with its own count).
stop_run "$s0_pid"
wait_for s1b "ending it here too" 60

expect_exit "$s0_pid" 300 0 "shard 0"
expect_exit "$s1b_pid" 300 0 "the restarted shard 1"
expect_exit "$l0_pid" 60 0 "learner 0"
expect_exit "$l1_pid" 60 0 "learner 1"

read -ra final0 <<<"$(json_array "$work/s0.json" final_versions)"
read -ra final1 <<<"$(json_array "$work/s1.json" final_versions)"
((${#final0[@]} == 2 && ${#final1[@]} == 2)) || die "a shard's report has no final versions"
((final1[0] == 0 && final0[1] == 0)) || die "a shard merged a fragment it does not own"
owner_final=("${final0[0]}" "${final1[1]}")
for learner in l0 l1; do
  read -ra adopted <<<"$(json_array "$work/$learner.json" max_adopted_versions)"
  ((${#adopted[@]} == 2)) || die "$learner's report has no adopted versions"
  for p in 0 1; do
    ((owner_final[p] >= adopted[p])) ||
      die "fragment $p: $learner adopted version ${adopted[p]}, its shard ended at ${owner_final[p]}"
  done
done
for report in s0 s1; do
  [[ $(json_number "$work/$report.json" version_decreases) == 0 ]] || die "$report: a global version went down"
done
# The learners' processes are the run's own: the machine's load leaves them out, and says so.
[[ $(json_number "$work/s0.json" learner_processes) == 2 ]] || die "s0: the 2 learner processes were not counted as the run's"
awk -v s="$(json_number "$work/s0.json" learner_processes_cpu_seconds)" 'BEGIN { exit !(s > 0) }' ||
  die "s0: no CPU time of the learner processes"
# One model of the run: each shard wrote its final checkpoint; put together, evaluated and saved, it
# holds each fragment at its owner's final version.
"$atoll" assemble "$work/topo.toml" --run-name t --report "$work/model.json" --save-model "$work/final.atoll-model" \
  >"$work/assemble.log" 2>&1 || { cat "$work/assemble.log"; die "atoll assemble failed"; }
read -ra assembled <<<"$(json_array "$work/model.json" final_versions)"
[[ "${assembled[*]}" == "${owner_final[*]}" ]] || die "assembled versions ${assembled[*]}, the shards ended at ${owner_final[*]}"
loss=$(json_number "$work/model.json" loss)
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 100) }' || die "the assembled model's held-out loss is '$loss'"
[ -s "$work/final.atoll-model" ] || die "no model file saved"
# One report of the run, from both shards' final figures: the restarted shard went on from its checkpoint's,
# so its count holds its first process's rounds, and the run's merges are both shards' (as one process
# holding both would count them).
grep -q "continuing the run's figures from its checkpoint ([1-9]" "$work/s1b.log" ||
  die "the restarted shard 1 did not go on from its checkpoint's figures"
restored=$(grep -o "restored checkpoint of round [0-9]*" "$work/s1b.log" | grep -o "[0-9]*$")
(($(json_number "$work/s1.json" rounds) > restored)) ||
  die "the restarted shard 1 counts $(json_number "$work/s1.json" rounds) rounds, not more than the $restored it restored"
python3 - "$work/model.json" "$work/s0.json" "$work/s1.json" <<'PY' || die "the run's report does not add up (above)"
import json, sys
run, s0, s1 = (json.load(open(p)) for p in sys.argv[1:])
problems = []
if [s["shard"] for s in run["shards"]] != [0, 1]: problems.append(f"shards {run['shards']}")
for key in ("rounds", "merged_pushes"):
    if run[key] != s0[key] + s1[key]: problems.append(f"{key}: {run[key]}, the shards {s0[key]} + {s1[key]}")
if run["tokens"] != max(s0["tokens"], s1["tokens"]): problems.append(f"tokens {run['tokens']}")
if not 0 < run["goodput"] <= 1: problems.append(f"goodput {run['goodput']}")
if not run["eval"]["final"]: problems.append("the held-out figure is not of the final model")
for l in run["per_learner"]:
    merged = [next(x["merged"] for x in s["per_learner"] if x["id"] == l["id"]) for s in (s0, s1)]
    if l["merged"] != sum(merged) or min(merged) <= 0:
        problems.append(f"learner {l['id']}: {l['merged']} merged, the shards {merged}")
for p in problems: print("run report:", p)
print(f"run report: {run['rounds']} rounds ({s0['rounds']} + {s1['rounds']}), {run['tokens']} tokens, goodput "
      f"{run['goodput']:.3f}, merges per learner {[l['merged'] for l in run['per_learner']]}")
sys.exit(1 if problems else 0)
PY
echo "shard_kill_test: ok (fragment 0 at ${owner_final[0]}, fragment 1 at ${owner_final[1]}; no adopted version lost; one report with the model's held-out loss $loss)"
