#!/usr/bin/env bash
# The wheel where users train, as they would install it: built by scripts/wheel
# for an interpreter other than the build's own (pyenv's 3.12, which has no
# NumPy and no torch), installed with pip into a fresh venv outside the source
# tree, and used with LD_LIBRARY_PATH and PYTHONPATH unset:
#   - import atoll, NumPy not loaded; an atoll.run() job of atoll's own model;
#   - `atoll syncer` and two `atoll learner` processes of the installed command
#     complete a run, both learners merged;
#   - every ELF file of the wheel resolves its libraries inside the wheel, or to
#     glibc, libstdc++/libgcc and OpenSSL 3; the module has no NumPy ABI
#     (tests/deploy/wheel_job.sh);
#   - pip install . from the clone (pyproject.toml) installs one that runs.
# Usage: wheel_test.sh REPO_ROOT BUILD_DIR
# $ATOLL_WHEEL_PYTHON: the interpreter (CMake passes the first of ATOLL_WHEEL_PYTHONS).
# Exit 0 pass, 1 fail, 77 skipped (no other interpreter).
set -euo pipefail
repo=$(cd "${1:?usage: wheel_test.sh REPO_ROOT BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: wheel_test.sh REPO_ROOT BUILD_DIR}" && pwd)
python=${ATOLL_WHEEL_PYTHON:-}
if [ -z "$python" ]; then
  echo "skipped: no interpreter other than the build's own to build a wheel for (ATOLL_WHEEL_PYTHONS is empty;" \
       "a build with tests takes pyenv's 3.12 where present)"
  exit 77
fi

# Outside the source tree, as a user's venv is; kept when the test fails.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/atoll-wheel-test.XXXXXX")
venv=$scratch/venv
work=$scratch/work
mkdir -p "$work"
unset LD_LIBRARY_PATH PYTHONPATH ATOLL_DATA_DIR
cd "$scratch"
die() { echo "FAILED: $*" >&2; tail -n 25 "$work"/*.log >&2 || true; exit 1; }

"$repo/scripts/wheel" "$python" --build "$build" --out "$scratch/dist" >"$work/wheel.log" 2>&1 ||
  die "scripts/wheel failed"
wheel=$(tail -n 1 "$work/wheel.log")
[[ "$wheel" == "$scratch"/dist/atoll-*-cp3*-linux_x86_64.whl && -f "$wheel" ]] || die "no wheel: $wheel"
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

"$python" -m venv "$venv" >"$work/venv.log" 2>&1 || die "$python -m venv failed"
"$venv/bin/python" -m pip install --no-index --disable-pip-version-check -q "$wheel" >"$work/pip.log" 2>&1 ||
  die "pip install of the wheel failed"
bash "$repo/tests/deploy/wheel_job.sh" "$venv" "$scratch/job" || exit 1

# pip install . from the clone (pyproject.toml) builds the same wheel, here from this build's tree.
"$python" -m venv "$scratch/venv2" >>"$work/venv.log" 2>&1 || die "$python -m venv failed"
ATOLL_WHEEL_BUILD=$build "$scratch/venv2/bin/python" -m pip install --no-index --disable-pip-version-check -q \
  "$repo" >"$work/pip-source.log" 2>&1 || die "pip install . from the clone failed"
"$scratch/venv2/bin/python" -c "import atoll, sys; assert atoll.__file__.startswith(sys.prefix)" >>"$work/pip-source.log" \
  2>&1 || die "the package pip built from the clone does not import"
"$scratch/venv2/bin/atoll" --help >/dev/null 2>>"$work/pip-source.log" || die "atoll from pip install . does not run"
echo "pip install . from the clone: the same wheel, installed and run"
rm -rf "$scratch"
