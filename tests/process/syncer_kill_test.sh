#!/usr/bin/env bash
# The syncer process is killed (kill -9) after it wrote a checkpoint. The
# learners train on, a new syncer process on the same port restores the
# checkpoint, takes newer versions from the learners' bases, and they
# reconnect. The test then stops the run. No version any learner adopted is
# lost: at the end the global version of every fragment is at least the
# newest any learner adopted.
# Usage: syncer_kill_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000  # ended by the test
sed -i "s|^dir = \"\"|dir = \"$work/ckpt\"\nevery_rounds = 4\nevery_seconds = 1|" "$work/topo.toml"
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 --run-name t --timeout 2 --report "$work/first.json"
start_learner l0 0 --report "$work/l0.json"
start_learner l1 1 --report "$work/l1.json"
wait_for syncer "learner 1 registered" 60
wait_for syncer "checkpointer: wrote" 60  # a checkpoint to restore
# Two more checkpoints, 4 rounds apart: rounds merged past the first one, so the learners hold
# versions it lacks (past the newest one too, unless the kill falls right after it is written).
written=$(grep -c "checkpointer: wrote" "$work/syncer.log")
wait_for syncer "checkpointer: wrote" 60 $((written + 2))
kill -9 "$syncer_pid"
wait_for l0 "lost the syncer" 30
wait_for l1 "lost the syncer" 30

start_syncer syncer2 "$work/topo.toml" --listen "127.0.0.1:$port" --run-name t --timeout 2 --report "$work/syncer.json"
wait_for syncer2 "restored checkpoint" 30
wait_for l0 "connected to the syncer" 60 2
wait_for l1 "connected to the syncer" 60 2
wait_for syncer2 "checkpointer: wrote" 60 3  # a few rounds with the restarted syncer
stop_run "$syncer2_pid"

expect_exit "$syncer2_pid" 300 0 "the restarted syncer"
expect_exit "$l0_pid" 30 0 "learner 0"
expect_exit "$l1_pid" 30 0 "learner 1"

read -ra final <<<"$(json_array "$work/syncer.json" final_versions)"
((${#final[@]} == 2)) || die "the report has no final versions"
for learner in l0 l1; do
  read -ra adopted <<<"$(json_array "$work/$learner.json" max_adopted_versions)"
  ((${#adopted[@]} == 2)) || die "$learner's report has no adopted versions"
  for p in 0 1; do
    ((final[p] >= adopted[p])) ||
      die "fragment $p: $learner adopted version ${adopted[p]}, the global model ended at ${final[p]}"
  done
done
[[ $(json_number "$work/syncer.json" version_decreases) == 0 ]] || die "a global version went down"
echo "syncer_kill_test: ok (final versions ${final[*]}; no adopted version lost)"
