#!/usr/bin/env bash
# Who may not join, and what may not crash the syncer: no token, a wrong
# token, an unknown id, a duplicate id, random bytes and an oversized frame
# on the syncer's port. Every refusal is said to the refused and counted by
# the syncer, which then goes on with the learners that may join.  Usage: refusals_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000  # ended by the test
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 --report "$work/syncer.json"

# No token at all: refused before anything is sent (exit 2).
status=0
env -u ATOLL_TOKEN "$atoll" learner --join "127.0.0.1:$port" --id 0 "${learner_net[@]}" >"$work/none.log" 2>&1 || status=$?
((status == 2)) || die "a learner without a token exited with $status, not 2"
grep -q "no cluster token" "$work/none.log" || die "no reason given for the missing token"

# A wrong token: the syncer refuses it (exit 77: starting it again cannot help, with the reason).
status=0
ATOLL_TOKEN="not-the-cluster-token-at-all" "$atoll" learner --join "127.0.0.1:$port" --id 0 "${learner_net[@]}" \
  >"$work/wrong.log" 2>&1 || status=$?
((status == 77)) || die "a learner with a wrong token exited with $status, not 77"
grep -q "bad_token" "$work/wrong.log" || die "no bad_token reason for a wrong token"
grep -q "$ATOLL_TOKEN" "$work"/*.log && die "the token appears in a log"

# An id the topology does not have.
status=0
"$atoll" learner --join "127.0.0.1:$port" --id 7 "${learner_net[@]}" >"$work/unknown.log" 2>&1 || status=$?
((status == 77)) || die "a learner with an unknown id exited with $status, not 77"
grep -q "not in this topology of 2 learners" "$work/unknown.log" || die "no reason for an unknown id"

# Random bytes, a frame claiming 4 GiB, a half-sent frame: nothing crashes.
for i in $(seq 20); do
  head -c $((i * 997)) /dev/urandom >/dev/tcp/127.0.0.1/"$port" 2>/dev/null || true
done
printf '\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' \
  >/dev/tcp/127.0.0.1/"$port" 2>/dev/null || true
kill -0 "$syncer_pid" 2>/dev/null || die "the syncer died of random bytes"

# A real learner joins; a second process with the same id is refused while it lives.
start_learner l0 0
wait_for syncer "learner 0 registered" 60
start_learner dup 0
wait_for dup "duplicate_learner" 30
kill -9 "$dup_pid"
start_learner l1 1
wait_for syncer "learner 1 registered" 60
stop_run "$syncer_pid"
expect_exit "$syncer_pid" 300 0 "the syncer"
expect_exit "$l0_pid" 30 0 "learner 0"
expect_exit "$l1_pid" 30 0 "learner 1"
rejected=$(json_number "$work/syncer.json" rejected)
((rejected >= 3)) || die "the syncer counted $rejected refusals, expected at least 3"
echo "refusals_test: ok ($rejected refusals counted; the syncer survived random bytes and finished)"
