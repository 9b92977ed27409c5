#!/usr/bin/env bash
# A learner process is frozen (SIGSTOP: a half-open connection), then killed
# (kill -9). The syncer finds the frozen one by heartbeat within its timeout,
# goes on with the other learner, and a new process for the killed id joins
# and is merged again, one restart in the report; then the run is stopped and
# every process ends cleanly.  Usage: learner_kill_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000  # ended by the test
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 --timeout 2 --report "$work/syncer.json"
start_learner l0 0
start_learner l1 1
wait_for syncer "learner 0 registered" 60
wait_for syncer "learner 1 registered" 60

# Frozen: heartbeats stop, the TCP connection stays open.
kill -STOP "$l1_pid"
frozen_at=$(date +%s%N)
wait_for syncer "learner 1 is down" 30
found_after=$(awk -v ns=$(($(date +%s%N) - frozen_at)) 'BEGIN { printf "%.1f", ns / 1e9 }')
echo "a frozen learner process was found after ${found_after} s (timeout 2 s, heartbeat 1 s)"
kill -CONT "$l1_pid"
# Thawed, it finds its connection gone, reconnects and registers again.
wait_for syncer "learner 1 registered" 60 2
wait_for syncer "learner 1 is merged again" 60 1

kill -9 "$l1_pid"
wait_for syncer "learner 1 is down" 30 2
start_learner l1b 1
wait_for syncer "learner 1 registered" 60 3
wait_for syncer "learner 1 is merged again" 60 2
stop_run "$syncer_pid"

expect_exit "$syncer_pid" 300 0 "the syncer"
expect_exit "$l0_pid" 30 0 "learner 0"
expect_exit "$l1b_pid" 30 0 "the restarted learner 1"
grep -q "the run is over" "$work/l1b.log" || die "the restarted learner 1 was not told the run is over"
tokens=$(learner_json "$work/syncer.json" 1 | json_number - last_incarnation_tokens)
((tokens > 0)) || die "the restarted learner 1 trained no tokens the syncer knows of"
[[ $(json_number "$work/syncer.json" version_decreases) == 0 ]] || die "a global version went down"
# One restart: the killed process's successor (a new incarnation). The frozen
# and thawed one came back as the same incarnation: a reconnection, not a restart.
[[ $(json_number "$work/syncer.json" restarts) == 1 ]] ||
  die "the report counts $(json_number "$work/syncer.json" restarts) restarts, not 1"
[[ $(learner_json "$work/syncer.json" 1 | json_number - restarts) == 1 ]] || die "learner 1 has no restart in the report"
python3 -c 'import json, sys; assert len(json.load(open(sys.argv[1]))["reintegration_seconds"]) == 1' \
  "$work/syncer.json" || die "not one re-integration time in the report"
echo "learner_kill_test: ok (frozen found after ${found_after} s; the killed learner's new process trained $tokens tokens)"
