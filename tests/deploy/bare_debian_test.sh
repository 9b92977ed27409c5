#!/usr/bin/env bash
# This build's wheel for Debian's python3 on a bare Debian 12 (debootstrap:
# none of atoll's libraries installed), doing what a user does with it
# (scripts/bare_debian_check runs tests/deploy/wheel_job.sh chrooted there).
# Usage: bare_debian_test.sh REPO_ROOT BUILD_DIR
# Exit 0 pass, 1 fail, 77 skipped (not root, or no debootstrap).
set -euo pipefail
repo=$(cd "${1:?usage: bare_debian_test.sh REPO_ROOT BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: bare_debian_test.sh REPO_ROOT BUILD_DIR}" && pwd)
command -v debootstrap >/dev/null || { echo "skipped: debootstrap is not installed (scripts/setup installs it)"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "skipped: debootstrap and chroot need root here"; exit 77; }
dist=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bare-wheel.XXXXXX")
trap 'rm -rf "$dist"' EXIT
"$repo/scripts/wheel" /usr/bin/python3 --build "$build" --out "$dist" >"$dist/wheel.log" 2>&1 ||
  { tail -n 20 "$dist/wheel.log"; echo "FAILED: scripts/wheel"; exit 1; }
"$repo/scripts/bare_debian_check" "$(tail -n 1 "$dist/wheel.log")"
