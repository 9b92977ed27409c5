#!/usr/bin/env bash
# A syncer in two processes (syncer.shards = 2) draws a curve: each shard,
# run with --curve 4, writes its part of the model at each planned point of
# the token budget beside its checkpoints. Shard 1 is killed (kill -9) once
# it wrote its first point and started again: it goes on from its checkpoint's
# figures, so the points it wrote stay taken. The run ends at the budget, by
# shard 0's count, in every process; `atoll assemble` then makes the run's one
# report: the final model's held-out figure, and a curve whose points are the
# shards' parts put together, on the run's clock.
# Usage: shard_curve_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

budget=60000
write_topology "$work/topo.toml" "$budget" "[syncer]
shards = 2"
sed -i "s|^dir = \"\"|dir = \"$work/ckpt\"\nevery_rounds = 4\nevery_seconds = 1|" "$work/topo.toml"
start_syncer s0 "$work/topo.toml" --listen 127.0.0.1:0 --shard 0/2 --run-name t --curve 4 --report "$work/s0.json"
port0=$port
start_syncer s1 "$work/topo.toml" --listen 127.0.0.1:0 --shard 1/2 --run-name t --curve 4 --report "$work/first.json"
port1=$port
join="127.0.0.1:$port0,127.0.0.1:$port1"  # every shard
for id in 0 1; do start_learner "l$id" "$id" --report "$work/l$id.json"; done
wait_for s1 "checkpointer shard 1: wrote .*point-0.atoll" 60
written=$(grep -c "checkpointer shard 1: wrote .*checkpoint-" "$work/s1.log")
wait_for s1 "checkpointer shard 1: wrote .*checkpoint-" 60 $((written + 1))  # one written after point 0
kill -9 "$s1_pid"
start_syncer s1b "$work/topo.toml" --listen "127.0.0.1:$port1" --shard 1/2 --run-name t --curve 4 --report "$work/s1.json"
wait_for s1b "continuing the run's figures from its checkpoint" 30

expect_exit "$s0_pid" 300 0 "shard 0"
expect_exit "$s1b_pid" 300 0 "the restarted shard 1"
expect_exit "$l0_pid" 60 0 "learner 0"
expect_exit "$l1_pid" 60 0 "learner 1"
for shard in 0 1; do
  for k in 0 1 2; do
    [ -s "$work/ckpt/t/shard-$shard/point-$k.atoll" ] || die "shard $shard wrote no point $k of the curve"
  done
done

# The restarted shard knew point 0 was taken (its checkpoint's count had passed it): the next it wrote was 1.
! grep -q "point-0.atoll" "$work/s1b.log" || die "the restarted shard 1 wrote point 0 again"

"$atoll" assemble "$work/topo.toml" --run-name t --report "$work/run.json" >"$work/assemble.log" 2>&1 ||
  { cat "$work/assemble.log"; die "atoll assemble failed"; }
python3 - "$work/run.json" "$budget" <<'PY' || die "the run's curve is wrong (above)"
import json, math, sys
run, budget = json.load(open(sys.argv[1])), int(sys.argv[2])
curve, problems = run["curve"], []
if len(curve) != 4: problems.append(f"{len(curve)} points, not 3 and the end")
for k, c in enumerate(curve[:-1]):
    # Point k is taken once the shard's count passed (k + 1) / 4 of the budget; its tokens, the most any
    # shard had counted then, are at least that.
    if c["tokens"] < (k + 1) * budget // 4: problems.append(f"point {k} at {c['tokens']} tokens")
    if not math.isfinite(c["loss"]): problems.append(f"point {k}: loss {c['loss']}")
for a, b in zip(curve, curve[1:]):
    if not (a["seconds"] < b["seconds"] and a["tokens"] <= b["tokens"]): problems.append(f"out of order: {a} then {b}")
if curve and curve[-1]["loss"] != run["eval"]["loss"]: problems.append("the last point is not the final model's")
if run["tokens"] < budget: problems.append(f"{run['tokens']} tokens, under the budget")
for p in problems: print("curve:", p)
print("curve:", [(round(c["seconds"], 1), c["tokens"], round(c["loss"], 4)) for c in curve])
sys.exit(1 if problems else 0)
PY
echo "shard_curve_test: ok ($(grep -o 'curve (seconds.*' "$work/assemble.log"))"
