#!/usr/bin/env bash
# Open membership across real processes (docs/design.md section 6): a syncer
# with 2 fixed learners and membership.max_learners = 4. Learners 0 and 1
# start with ids; once both are merged two learners join without ids and are
# given the open slots 2 and 3; a fifth is refused as "full". Once all four are
# merged, one joiner is told to stop (SIGTERM): it pushes its last progress, the
# syncer merges it and records a departure, and it exits 0; a new joiner takes
# its slot. Once it is merged too (every wait polls the syncer's --metrics
# status, /status.json, or its log; none sleeps a fixed time), the run is
# ended: every process exits 0, and the report lists four learners, the
# joiners with merged pushes, 3 joins and 1 departure.
# Usage: membership_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000 $'[membership]\nmax_learners = 4'  # ended by the test
metrics=$(free_port)
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 --report "$work/syncer.json" --metrics "127.0.0.1:$metrics"
start_learner l0 0
start_learner l1 1
wait_for syncer "learner 0 registered" 60
wait_for syncer "learner 1 registered" 60
# The run under way: both fixed learners merged, a few rounds done, before anyone joins.
wait_status "$metrics" 'rounds >= 10 and all(l["merged"] > 0 for l in per_learner[:2])' 120

# start_joiner NAME [ARGS...]: `atoll learner` without --id.
start_joiner() {
  local name=$1
  shift
  "$atoll" learner --join "127.0.0.1:$port" -v --threads 1 --speed 0.05 --batch 16 "${learner_net[@]}" "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}
start_joiner j2
wait_for j2 "learner 2 \(open slot" 30
start_joiner j3
wait_for j3 "learner 3 \(open slot" 30
wait_for syncer "learner 2 registered" 60
wait_for syncer "learner 3 registered" 60

# Every slot is held: a fifth is refused, saying why, and does not retry.
start_joiner full
expect_exit "$full_pid" 60 77 "the fifth joiner (refused: full)"
grep -q "(full): all 2 open slots are taken" "$work/full.log" || die "the fifth joiner was not told the run is full"

# All four merged, then one joiner is told to stop: it leaves in order.
wait_status "$metrics" 'len(per_learner) == 4 and all(l["merged"] > 0 for l in per_learner)' 120
kill -TERM "$j3_pid"
expect_exit "$j3_pid" 60 0 "the joiner told to stop"
grep -q "it leaves the run" "$work/j3.log" || die "the leaver exited without the syncer's word that its progress is settled"
wait_for syncer "learner 3 departs" 10
wait_for syncer "learner 3 has gone" 10
grep -q "learner 3 is down" "$work/syncer.log" && die "the syncer counted the departure as a failure"
merged3=$(status_value "$metrics" 'per_learner[3]["merged"]')  # slot 3's record, its leaver's pushes

# Its slot is free again: the next joiner gets it.
start_joiner j3b
wait_for j3b "learner 3 \(open slot" 30
wait_for syncer "learner 3 registered" 60 2
# The newcomer in slot 3 merged too before the run ends.
wait_status "$metrics" "per_learner[3][\"merged\"] > $merged3" 120
stop_run "$syncer_pid"

expect_exit "$syncer_pid" 300 0 "the syncer"
for p in l0 l1 j2 j3b; do
  pid_var="${p}_pid"
  expect_exit "${!pid_var}" 60 0 "learner process $p"
done
report="$work/syncer.json"
[[ $(json_number "$report" learners) == 4 ]] || die "the report does not list 4 learners"
[[ $(json_number "$report" joins) == 3 ]] || die "the report does not count 3 joins"
[[ $(json_number "$report" departures) == 1 ]] || die "the report does not count 1 departure"
[[ $(json_number "$report" version_decreases) == 0 ]] || die "a global version went down"
for id in 2 3; do
  merged=$(learner_json "$report" "$id" | json_number - merged)
  ((merged > 0)) || die "joiner $id has no merged push"
  echo "joiner $id: $merged pushes merged"
done
departed=$(learner_json "$report" 3 | json_number - departures)
((departed == 1)) || die "slot 3's record does not count its departure"
echo "membership_test: ok"
