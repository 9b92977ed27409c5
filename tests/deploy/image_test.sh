#!/usr/bin/env bash
# The atoll image, built for real with podman from a debootstrapped Debian 12
# (scripts/image, from the wheel of this build: no compiling in the image), and
# its entrypoint run: a syncer and three learners, each atoll-node in a
# container of its own, one learner's atoll killed (SIGKILL) and started again
# by atoll-node's relaunch loop (ATOLL_RESTARTS). The run completes: every
# node exits 0, the killed learner registered again and was merged again, no
# global version went down.
# `podman run` is refused by this sandbox's rlimits, so each container's root
# (podman create + podman mount: writable, its own filesystem) is run with
# chroot, with /proc and /dev mounted; the nodes share the host's network and
# talk over loopback, as the pods of one host would.
# Usage: image_test.sh REPO_ROOT BUILD_DIR
# Exit 0 pass, 1 fail, 77 skipped (not root, or podman or debootstrap missing).
set -euo pipefail
repo=$(cd "${1:?usage: image_test.sh REPO_ROOT BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: image_test.sh REPO_ROOT BUILD_DIR}" && pwd)
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (scripts/setup installs it)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skipped: building an image and chroot need root here"; exit 77; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/atoll-image-test.XXXXXX")
tag=test-$$
containers=()
node_pids=()
cleanup() {
  for p in "${node_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  pkill -9 -f "token-file /etc/atoll/token" 2>/dev/null || true  # the nodes' own atoll processes
  for p in "${node_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for c in "${containers[@]}"; do
    r=$(podman mount "$c" 2>/dev/null) && { umount "$r/proc" "$r/dev" 2>/dev/null || true; }
    podman umount "$c" >/dev/null 2>&1 || true
    podman rm -f "$c" >/dev/null 2>&1 || true
  done
  podman rmi -f "localhost/atoll:$tag" >/dev/null 2>&1 || true
}
trap cleanup EXIT
die() {
  echo "FAILED: $*" >&2
  for f in "$scratch"/*.log; do
    echo "---- $f (last 25 lines)" >&2
    tail -n 25 "$f" >&2 || true
  done
  exit 1
}

"$repo/scripts/wheel" /usr/bin/python3 --build "$build" --out "$scratch/dist" >"$scratch/wheel.log" 2>&1 ||
  die "scripts/wheel failed"
wheel=$(tail -n 1 "$scratch/wheel.log")
"$repo/scripts/image" --wheel "$wheel" --tag "$tag" 2>&1 | tee "$scratch/image.log" | grep '^image: ' || true
podman image exists "localhost/atoll:$tag" || die "scripts/image made no localhost/atoll:$tag"

cat >"$scratch/topology.toml" <<'TOML'
tokens = 1200000
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
[checkpoint]
dir = "/var/lib/atoll"
[[learners]]
speed = 0.1
batch_size = 16
[[learners]]
speed = 0.1
batch_size = 16
[[learners]]
speed = 0.1
batch_size = 16
TOML
head -c 32 /dev/urandom | base64 >"$scratch/token"
chmod 600 "$scratch/token"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# node NAME VAR=VALUE...: atoll-node, the image's entrypoint, in a container of its own; sets NAME_pid.
node() {
  local name=$1 c root
  shift
  c=$(podman create --name "atoll-image-test-$$-$name" "localhost/atoll:$tag")
  containers+=("$c")
  root=$(podman mount "$c")
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  mkdir -p "$root/etc/atoll"
  cp "$scratch/token" "$scratch/topology.toml" "$root/etc/atoll/"
  chroot "$root" /usr/bin/env -i PATH=/opt/atoll/atoll/_bin:/usr/bin:/bin HOME=/root \
    ATOLL_SYNCER="127.0.0.1:$port" ATOLL_TOKEN_FILE=/etc/atoll/token "$@" atoll-node >"$scratch/$name.log" 2>&1 &
  node_pids+=($!)
  eval "${name}_pid=$!"
  eval "${name}_root=$root"
}

wait_for() {  # NAME PATTERN SECONDS [COUNT]
  local count=${4:-1}
  for _ in $(seq $(($3 * 10))); do
    (($(grep -c -E -- "$2" "$scratch/$1.log" || true) >= count)) && return 0
    sleep 0.1
  done
  die "$1: no $count line(s) matching '$2' within $3 s"
}

expect_exit() {  # PID SECONDS STATUS WHAT
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$1" 2>/dev/null && die "$4 did not end within $2 s"
  local status=0
  wait "$1" || status=$?
  ((status == $3)) || die "$4 exited with $status, not $3"
}

node syncer ATOLL_ROLE=syncer ATOLL_TOPOLOGY=/etc/atoll/topology.toml ATOLL_CHECKPOINT_DIR=/var/lib/atoll \
  ATOLL_REPORT=/var/lib/atoll/report.json ATOLL_ARGS="-q -v"
wait_for syncer "serving learners" 30
for id in 0 1 2; do
  node "learner$id" ATOLL_ROLE=learner ATOLL_LEARNER_ID=$id ATOLL_RESTARTS=3
done
wait_for syncer "learner 1 registered" 60
wait_for syncer "checkpointer: wrote" 60 2  # rounds go on with learner 1 in them

# Learner 1's atoll, not its node: atoll-node sees it killed and starts it again.
victim=$(pgrep -P "$learner1_pid" -x atoll) || die "learner 1's atoll-node runs no atoll"
kill -9 "$victim"
wait_for learner1 "relaunching" 30
wait_for syncer "learner 1 registered" 60 2
wait_for syncer "learner 1 is merged again" 120

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
assert r["tokens"] >= 1200000, r["tokens"]
assert r["version_decreases"] == 0, r["version_decreases"]
learners = {l["id"]: l for l in r["per_learner"]}
assert all(learners[i]["merged"] > 0 for i in (0, 1, 2)), learners
assert learners[1]["last_incarnation_tokens"] > 0, learners[1]
print(f"the run in the image: {r['tokens']} tokens, {r['rounds']} rounds, goodput {r['goodput']:.3f}; "
      f"learner 1 killed, relaunched by atoll-node, trained {learners[1]['last_incarnation_tokens']} tokens more")
PY
rm -rf "$scratch"
