# Helpers for the image tests: containers of a built image run with chroot.
# `podman run` is refused by this sandbox's rlimits, so each container's root
# (podman create + podman mount: writable, a filesystem of its own) is run
# with chroot, with /proc and /dev mounted; the containers share the host's
# network and talk over loopback, as the pods of one host would.
# Usage (from a test): source image_lib.sh; then `start NAME IMAGE CMD...`.
# Every wait is bounded; a failed expectation prints the logs and exits 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../process/topology.sh"
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (scripts/setup installs it)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skipped: building an image and chroot need root here"; exit 77; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/atoll-image-test.XXXXXX")  # kept when a test fails
tag=test-$$
containers=()
pids=()
images=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for c in "${containers[@]}"; do
    r=$(podman mount "$c" 2>/dev/null) || continue
    for p in /proc/[0-9]*; do  # whatever still runs in that root, children included
      [ "$(readlink "$p/root" 2>/dev/null)" = "$r" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
    done
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for c in "${containers[@]}"; do
    r=$(podman mount "$c" 2>/dev/null) && { umount "$r/proc" "$r/dev" 2>/dev/null || true; }
    podman umount "$c" >/dev/null 2>&1 || true
    podman rm -f "$c" >/dev/null 2>&1 || true
  done
  for i in "${images[@]}"; do podman rmi -f "$i" >/dev/null 2>&1 || true; done
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

# start NAME IMAGE [VAR=VALUE...] -- CMD...: CMD in a new container of IMAGE, in the
# background, with only the given environment; the files in $scratch/etc go to its
# /etc/atoll. Sets NAME_pid and NAME_root; the output goes to $scratch/NAME.log.
start() {
  local name=$1 image=$2 c root
  shift 2
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  c=$(podman create --name "atoll-image-test-$$-$name" "$image" true)  # the command is chroot's, below
  containers+=("$c")
  root=$(podman mount "$c")
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  mkdir -p "$root/etc/atoll"
  cp -r "$scratch/etc/." "$root/etc/atoll/"
  chroot "$root" /usr/bin/env -i PATH=/opt/atoll/atoll/_bin:/usr/local/bin:/usr/bin:/bin HOME=/root "${env[@]}" \
    "$@" >"$scratch/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
  eval "${name}_root=$root"
}

wait_for() {  # NAME PATTERN SECONDS [COUNT]: until NAME's log has COUNT lines matching PATTERN
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

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A fresh cluster token in $scratch/etc/token, which every container gets as /etc/atoll/token.
mkdir -p "$scratch/etc"
head -c 32 /dev/urandom | base64 >"$scratch/etc/token"
chmod 600 "$scratch/etc/token"
