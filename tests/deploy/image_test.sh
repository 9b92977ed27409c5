#!/usr/bin/env bash
# The atoll image, built for real with podman from a debootstrapped Debian 12
# (scripts/image, from the wheel of this build: no compiling in the image), and
# its entrypoint run: a syncer and three learners, each atoll-node in a
# container of its own (tests/deploy/image_lib.sh: chroot, since podman run is
# refused here), one learner's atoll killed (SIGKILL) and started again by
# atoll-node's relaunch loop (ATOLL_RESTARTS). Then the test ends the run
# (SIGINT to the syncer's atoll: in order, the learners told it is over): every
# node exits 0, the killed learner registered again and was merged again, no
# global version went down. The budget is one no run reaches: a budget raced
# the kill and the relaunch on a fast machine.
# Usage: image_test.sh REPO_ROOT BUILD_DIR
# Exit 0 pass, 1 fail, 77 skipped (not root, or podman or debootstrap missing).
set -euo pipefail
repo=$(cd "${1:?usage: image_test.sh REPO_ROOT BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: image_test.sh REPO_ROOT BUILD_DIR}" && pwd)
source "$repo/tests/deploy/image_lib.sh"

"$repo/scripts/wheel" /usr/bin/python3 --build "$build" --out "$scratch/dist" >"$scratch/wheel.log" 2>&1 ||
  die "scripts/wheel failed"
wheel=$(tail -n 1 "$scratch/wheel.log")
images+=("localhost/atoll:$tag")
"$repo/scripts/image" --wheel "$wheel" --tag "$tag" 2>&1 | tee "$scratch/image.log" | grep '^image: ' || true
podman image exists "localhost/atoll:$tag" || die "scripts/image made no localhost/atoll:$tag"

synthetic_topology "$scratch/etc/topology.toml" 1000000000000 3 0.1 /var/lib/atoll
port=$(free_port)
node=(ATOLL_SYNCER="127.0.0.1:$port" ATOLL_TOKEN_FILE=/etc/atoll/token)

start syncer "localhost/atoll:$tag" "${node[@]}" ATOLL_ROLE=syncer ATOLL_TOPOLOGY=/etc/atoll/topology.toml \
  ATOLL_CHECKPOINT_DIR=/var/lib/atoll ATOLL_REPORT=/var/lib/atoll/report.json ATOLL_ARGS="-q -v" -- atoll-node
wait_for syncer "serving learners" 30
for id in 0 1 2; do
  start "learner$id" "localhost/atoll:$tag" "${node[@]}" ATOLL_ROLE=learner ATOLL_LEARNER_ID=$id ATOLL_RESTARTS=3 \
    -- atoll-node
done
wait_for syncer "learner 1 registered" 60
wait_for syncer "checkpointer: wrote" 60 2  # rounds go on with learner 1 in them

# Learner 1's atoll, not its node: atoll-node sees it killed and starts it again.
victim=$(pgrep -P "$learner1_pid" -x atoll) || die "learner 1's atoll-node runs no atoll"
kill -9 "$victim"
wait_for learner1 "relaunching" 30
wait_for syncer "learner 1 registered" 60 2
wait_for syncer "learner 1 is merged again" 120
# Without ATOLL_RESTARTS, the syncer's node is atoll itself (atoll-node execs it).
[ "$(cat "/proc/$syncer_pid/comm")" = atoll ] || die "the syncer's node is not atoll: $(cat "/proc/$syncer_pid/comm")"
kill -INT "$syncer_pid"

expect_exit "$syncer_pid" 300 0 "the syncer's node"
for id in 0 1 2; do
  pid_var=learner${id}_pid
  expect_exit "${!pid_var}" 60 0 "learner $id's node"
done
report=$syncer_root/var/lib/atoll/report.json
[ -s "$report" ] || die "the syncer wrote no report"
python3 - "$report" <<'PY' || die "the report breaks an invariant"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["tokens"] > 0, r["tokens"]
assert r["version_decreases"] == 0, r["version_decreases"]
learners = {l["id"]: l for l in r["per_learner"]}
assert all(learners[i]["merged"] > 0 for i in (0, 1, 2)), learners
assert learners[1]["last_incarnation_tokens"] > 0, learners[1]
print(f"the run in the image: {r['tokens']} tokens, {r['rounds']} rounds, goodput {r['goodput']:.3f}; "
      f"learner 1 killed, relaunched by atoll-node, trained {learners[1]['last_incarnation_tokens']} tokens more")
PY
rm -rf "$scratch"
