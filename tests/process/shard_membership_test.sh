#!/usr/bin/env bash
# Open membership with a syncer in shards (docs/design.md, "A sharded
# syncer"): two shard processes (syncer.shards = 2), one fixed learner and
# membership.max_learners = 3. Two learners join without an id: each claims a
# slot at shard 0, which gives the ids (1, then 2: never one twice), and
# registers under it with both shards, which admit it to that open slot. A
# third is refused as "full" by shard 0. Every learner is welcomed by both
# shards and trains; the run ends once each shard merged pushes of every
# learner (waits poll each shard's --metrics status, /status.json, or the
# logs; none sleeps a fixed time). Every process exits 0, and each shard's
# report counts 2 joins and merged pushes of both joiners, of its own
# fragment only.
# Usage: shard_membership_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

synthetic_topology "$work/topo.toml" 1000000000 1 0.05 "" "[syncer]
shards = 2
[membership]
max_learners = 3"  # ended by the test
metrics0=$(free_port)
metrics1=$(free_port)
start_syncer s0 "$work/topo.toml" --listen 127.0.0.1:0 --shard 0/2 --report "$work/s0.json" --metrics "127.0.0.1:$metrics0"
port0=$port
start_syncer s1 "$work/topo.toml" --listen 127.0.0.1:0 --shard 1/2 --report "$work/s1.json" --metrics "127.0.0.1:$metrics1"
port1=$port
join="127.0.0.1:$port0,127.0.0.1:$port1"  # every shard
start_learner l0 0
wait_for s0 "learner 0 registered" 60
wait_for s1 "learner 0 registered" 60

# start_joiner NAME: `atoll learner` without --id, joining both shards.
start_joiner() {
  "$atoll" learner --join "$join" -v --threads 1 --speed 0.05 --batch 16 "${learner_net[@]}" >"$work/$1.log" 2>&1 &
  pids+=($!)
  eval "${1}_pid=$!"
}
start_joiner j1
wait_for j1 "learner 1 \(open slot" 30
start_joiner j2
wait_for j2 "learner 2 \(open slot" 30
for s in s0 s1; do
  for id in 1 2; do wait_for "$s" "learner $id registered" 60; done
done
# Every open slot is given: the next one is refused (by shard 0, which gives them) and does not retry.
start_joiner full
expect_exit "$full_pid" 60 77 "the third joiner (refused: full)"
grep -q "(full): all 2 open slots are taken" "$work/full.log" || die "the third joiner was not told the run is full"

# Both shards merge pushes of all three learners, each of its own fragment.
for m in "$metrics0" "$metrics1"; do
  wait_status "$m" 'len(per_learner) == 3 and all(l["merged"] > 0 for l in per_learner)' 120
done
stop_run "$s0_pid"
stop_run "$s1_pid"
expect_exit "$s0_pid" 300 0 "shard 0"
expect_exit "$s1_pid" 300 0 "shard 1"
for p in l0 j1 j2; do
  pid_var="${p}_pid"
  expect_exit "${!pid_var}" 60 0 "learner process $p"
done
for s in 0 1; do
  report="$work/s$s.json"
  [[ $(json_number "$report" learners) == 3 ]] || die "shard $s's report does not list 3 learners"
  [[ $(json_number "$report" joins) == 2 ]] || die "shard $s's report does not count 2 joins"
  [[ $(json_number "$report" version_decreases) == 0 ]] || die "shard $s: a global version went down"
  read -ra final <<<"$(json_array "$report" final_versions)"
  ((final[s] > 0 && final[1 - s] == 0)) || die "shard $s ended at versions ${final[*]}: not its own fragment $s alone"
  for id in 1 2; do
    merged=$(learner_json "$report" "$id" | json_number - merged)
    ((merged > 0)) || die "shard $s merged no push of joiner $id"
    echo "shard $s: joiner $id, $merged pushes merged"
  done
done
echo "shard_membership_test: ok"
