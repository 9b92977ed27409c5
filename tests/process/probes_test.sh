#!/usr/bin/env bash
# What a cluster engine sees of real processes: /healthz and /readyz on the
# syncer's and a learner's --metrics server (no token needed), and the exit
# statuses it acts on: 75 after leaving with --leave-status 75, 77 when
# refused, 75 for a syncer paused by SIGTERM (--on-signal pause: it writes a
# last checkpoint first; the learner, not ready while its syncer is away,
# trains on and rejoins the syncer started again), 75 when no syncer answers
# for --give-up seconds, 0 when the run is over. A syncer idle after its run
# (--after-run wait) tells a learner that comes late that the run is over
# (it exits 0), also when started again with the same run name, and on every
# shard's port when one process holds them all.
# Usage: probes_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

# probe PORT PATH: "CODE BODY" of a GET, without a token.
probe() {
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=5)
    print(r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
except OSError as e:
    print("none", e)
PY
}
# wait_probe PORT PATH CODE SECONDS: until the probe answers CODE.
wait_probe() {
  for _ in $(seq $(($4 * 10))); do
    [[ "$(probe "$1" "$2")" == "$3 "* ]] && return 0
    sleep 0.1
  done
  die "$2 on port $1 did not answer $3 within $4 s (last: $(probe "$1" "$2"))"
}

write_topology "$work/topo.toml" 1000000000  # ended by the test
sm=$(free_port)
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 --metrics "127.0.0.1:$sm" \
  --set checkpoint.dir="$work/ck" --set checkpoint.every_rounds=20 --run-name probes --on-signal pause
wait_probe "$sm" /readyz 200 30
echo "syncer /readyz: $(probe "$sm" /readyz)"
[[ "$(probe "$sm" /healthz)" == "200 alive" ]] || die "syncer /healthz: $(probe "$sm" /healthz)"
[[ "$(probe "$sm" /metrics)" == 401* ]] || die "/metrics answered without the token"

lm=$(free_port)
start_learner l0 0 --metrics "127.0.0.1:$lm" --leave-status 75
wait_for syncer "learner 0 registered" 60
wait_probe "$lm" /readyz 200 30
echo "learner /readyz: $(probe "$lm" /readyz)"
[[ "$(probe "$lm" /healthz)" == "200 alive" ]] || die "learner /healthz: $(probe "$lm" /healthz)"
# Learner 1 is not there yet: the syncer is ready all the same (it takes learners).
[[ "$(probe "$sm" /readyz)" == 200* ]] || die "syncer /readyz with a learner missing: $(probe "$sm" /readyz)"
kill -TERM "$l0_pid"
expect_exit "$l0_pid" 60 75 "learner 0, asked to leave with --leave-status 75"

ATOLL_TOKEN="another-token-0123456789abcdefgh" start_learner wrong 1
expect_exit "$wrong_pid" 60 77 "a learner with the wrong token"
lm1=$(free_port)
start_learner l1 1 --metrics "127.0.0.1:$lm1"
wait_for syncer "learner 1 registered" 60
wait_probe "$lm1" /readyz 200 30
for _ in $(seq 600); do compgen -G "$work/ck/probes/checkpoint-*" >/dev/null && break; sleep 0.1; done
compgen -G "$work/ck/probes/checkpoint-*" >/dev/null || die "no checkpoint within 60 s"
# Paused: the syncer writes a last checkpoint and exits 75 without ending the
# run; learner 1 trains on, not ready while its syncer is away, and rejoins
# the syncer started again on the same port with the same run name.
newest_before=$(ls "$work/ck/probes" | grep checkpoint- | tail -n 1)
kill -TERM "$syncer_pid"
expect_exit "$syncer_pid" 30 75 "the syncer paused by SIGTERM (--on-signal pause)"
grep -q "paused: the last checkpoint is written" "$work/syncer.log" || die "the paused syncer wrote no last checkpoint"
newest_after=$(ls "$work/ck/probes" | grep checkpoint- | tail -n 1)
[[ "$newest_after" > "$newest_before" ]] || die "no checkpoint newer than $newest_before after the pause"
kill -0 "$l1_pid" 2>/dev/null || die "learner 1 ended with the paused syncer"
wait_probe "$lm1" /readyz 503 30
[[ "$(probe "$lm1" /readyz)" == "503 the syncer is away"* ]] || die "learner 1 /readyz, syncer away: $(probe "$lm1" /readyz)"
[[ "$(probe "$lm1" /healthz)" == "200 alive" ]] || die "learner 1 /healthz, syncer away: $(probe "$lm1" /healthz)"
echo "learner, syncer away: /readyz $(probe "$lm1" /readyz)"
# Started again, it runs 15 s more (a reconnecting learner may wait 5 s for its next try) and then idles
# (--after-run wait): the run is over for every learner.
sm2=$(free_port)
start_syncer syncer2 "$work/topo.toml" --listen "127.0.0.1:$port" --set checkpoint.dir="$work/ck" --run-name probes \
  --after-run wait --seconds 15 --metrics "127.0.0.1:$sm2"
wait_for syncer2 "restored checkpoint of round" 30
wait_for syncer2 "learner 1 registered" 60
wait_probe "$lm1" /readyz 200 30
expect_exit "$l1_pid" 60 0 "learner 1, whose run is over"
wait_probe "$sm2" /readyz 503 30
[[ "$(probe "$sm2" /readyz)" == "503 the run is over" ]] || die "idle syncer /readyz: $(probe "$sm2" /readyz)"
[[ "$(probe "$sm2" /healthz)" == "200 alive: the run is over" ]] || die "idle syncer /healthz: $(probe "$sm2" /healthz)"
[[ -s "$work/ck/probes/RUN-OVER" ]] || die "the idle syncer noted no RUN-OVER"
start_learner late 0
expect_exit "$late_pid" 60 0 "a learner that came after the run"
grep -q "nothing to train: .*the run is over" "$work/late.log" || die "the late learner was not told the run is over"
kill -TERM "$syncer2_pid"
expect_exit "$syncer2_pid" 30 0 "the idle syncer, stopped"
# Started again with the same run name (a StatefulSet restarting it): it finds the run over and idles at once.
start_syncer syncer3 "$work/topo.toml" --listen "127.0.0.1:$port" --set checkpoint.dir="$work/ck" --run-name probes \
  --after-run wait
wait_for syncer3 "is over .*not starting it again" 30
"$atoll" learner --join "127.0.0.1:$port" "${learner_net[@]}" >"$work/late2.log" 2>&1 ||
  die "a learner without an id, after the run, exited $?"
grep -q "nothing to train" "$work/late2.log" || die "the second late learner was not told the run is over"
kill -TERM "$syncer3_pid"
expect_exit "$syncer3_pid" 30 0 "the idle syncer started again, stopped"
echo "idle syncer: /readyz 503 the run is over; learners that came late exited 0"
# A syncer holding both shards in one process idles on both shards' ports, its note beside shard 0's checkpoints.
start_syncer sharded "$work/topo.toml" --listen 127.0.0.1:0 --set syncer.shards=2 --set outer.fragments=2 \
  --set checkpoint.dir="$work/ck2" --run-name sharded --after-run wait --seconds 2
[[ "$port" == *,* ]] || die "a syncer of 2 shards wrote one port: $port"
wait_for sharded "is over .*idle on .*,.*telling learners" 60
[[ -s "$work/ck2/sharded/shard-0/RUN-OVER" ]] || die "the idle sharded syncer noted no RUN-OVER beside shard 0"
for p in ${port//,/ }; do  # each shard's door tells a learner that comes late
  "$atoll" learner --join "127.0.0.1:$p" "${learner_net[@]}" >"$work/late-$p.log" 2>&1 ||
    die "a learner without an id at shard port $p, after the run, exited $?"
  grep -q "nothing to train" "$work/late-$p.log" || die "the learner at shard port $p was not told the run is over"
done
kill -TERM "$sharded_pid"
expect_exit "$sharded_pid" 30 0 "the idle sharded syncer, stopped"
echo "idle syncer in shards: both ports tell learners the run is over"
# No syncer: the learner's probes answer while it waits (alive, not ready), then it gives up with 75.
lm2=$(free_port)
# --give-up leaves room for the probes below on a loaded machine (with 6 s the learner had given up
# before /readyz was asked, under ctest -j4).
start_learner lost 1 --give-up 20 --metrics "127.0.0.1:$lm2"
wait_probe "$lm2" /healthz 200 5
[[ "$(probe "$lm2" /readyz)" == 503\ starting* ]] || die "a learner awaiting the syncer: /readyz $(probe "$lm2" /readyz)"
echo "learner awaiting the syncer: /healthz $(probe "$lm2" /healthz); /readyz $(probe "$lm2" /readyz)"
expect_exit "$lost_pid" 60 75 "a learner with no syncer for --give-up 20 s"
grep -q "no syncer" "$work/lost.log" || die "the lost learner did not say why"
echo "probes_test: ok (exit statuses: left 75, refused 77, paused 75, run over 0, came after the run 0, lost 75)"
