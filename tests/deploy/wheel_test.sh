#!/usr/bin/env bash
# The wheel where users train, as they would install it: built by scripts/wheel
# for an interpreter other than the build's own (pyenv's 3.12, which has no
# NumPy and no torch), installed with pip into a fresh venv outside the source
# tree, and used with LD_LIBRARY_PATH and PYTHONPATH unset:
#   - import atoll, NumPy not loaded; an atoll.run() job of atoll's own model;
#   - `atoll syncer` and two `atoll learner` processes of the installed command
#     complete a run, both learners merged;
#   - every ELF file of the wheel resolves its libraries inside the wheel, or to
#     glibc, libstdc++/libgcc and OpenSSL 3; the module has no NumPy ABI.
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
source "$repo/tests/process/lib.sh" "$venv/bin/atoll" "$scratch/work"
unset LD_LIBRARY_PATH PYTHONPATH ATOLL_DATA_DIR
cd "$scratch"

"$repo/scripts/wheel" "$python" --build "$build" --out "$scratch/dist" >"$work/wheel.log" 2>&1 ||
  die "scripts/wheel failed"
wheel=$(tail -n 1 "$work/wheel.log")
[[ "$wheel" == "$scratch"/dist/atoll-*-cp3*-linux_x86_64.whl && -f "$wheel" ]] || die "no wheel: $wheel"
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

"$python" -m venv "$venv" >"$work/venv.log" 2>&1 || die "$python -m venv failed"
"$venv/bin/python" -m pip install --no-index --disable-pip-version-check -q "$wheel" >"$work/pip.log" 2>&1 ||
  die "pip install of the wheel failed"
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
[ -x "$venv/bin/atoll" ] && [ -x "$venv/bin/atoll-node" ] || die "pip put no atoll or atoll-node on the venv's PATH"

# ldd of every ELF file: inside the wheel, or the system's glibc, libstdc++/libgcc and OpenSSL 3.
elves=0
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  elves=$((elves + 1))
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ "$path" != not ] || die "$f: $soname is not found"
    path=$(realpath -s "$path")
    case "$path" in
      "$site"/atoll.libs/*) continue ;;
    esac
    case "$soname" in
      libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | libstdc++.so.6 | libgcc_s.so.1 | \
        libssl.so.3 | libcrypto.so.3) ;;
      *) die "$f loads $soname from $path: outside the wheel, and not glibc, libstdc++/libgcc or OpenSSL" ;;
    esac
  done < <(ldd "$f")
done < <(find "$site/atoll" "$site/atoll.libs" -type f -print0)
((elves >= 5)) || die "only $elves ELF files in the installed wheel"
module=$(echo "$site"/atoll/_atoll.cpython-*.so)
if grep -q -a -E '_ARRAY_API|numpy\.core\.multiarray|_multiarray_umath' "$module"; then
  die "the module refers to NumPy's C API"
fi
echo "ldd: $elves ELF files resolve inside the wheel or to glibc, libstdc++/libgcc and OpenSSL"

# The package, from the venv's interpreter, outside the source tree: atoll's own model, in this process.
"$venv/bin/python" - >"$work/run.log" 2>&1 <<'PY' || die "import atoll or atoll.run() failed in the venv"
import sys
import atoll
assert atoll.__file__.startswith(sys.prefix), atoll.__file__
assert "numpy" not in sys.modules and "torch" not in sys.modules
topology = atoll.Topology({"tokens": 40000, "model": {"kind": "mlp", "hidden": [32]},
                           "data": {"kind": "synthetic", "features": 16, "classes": 4, "examples": 2048},
                           "outer": {"fragments": 2, "sync_every": 10}, "checkpoint": {"dir": ""},
                           "learners": [{"speed": 1.0, "batch_size": 16}, {"speed": 1.0, "batch_size": 16}]})
run = atoll.run(topology, compute_threads=1)
report = run.wait()
assert report["tokens"] >= 40000 and report["rounds"] > 0, report
params = run.parameters()
assert params.format == "f" and len(params) > 0
print(f"atoll {atoll.__version__} on Python {sys.version.split()[0]}: {report['tokens']} tokens, "
      f"{report['rounds']} rounds, held-out loss {report['eval']['loss']:.3f}")
PY
tail -n 1 "$work/run.log"
"$venv/bin/atoll" --help >"$work/help.log" 2>&1 || die "atoll --help failed"
grep -q "syncer" "$work/help.log" || die "atoll --help does not list its subcommands"

# The installed command: a syncer and two learners, three processes on loopback.
cat >"$work/topology.toml" <<'TOML'
tokens = 30000
[model]
kind = "mlp"
hidden = [32]
[data]
kind = "synthetic"
features = 16
classes = 4
examples = 2048
[outer]
fragments = 2
sync_every = 10
[checkpoint]
dir = ""
[[learners]]
batch_size = 16
[[learners]]
batch_size = 16
TOML
start_syncer syncer "$work/topology.toml" --listen 127.0.0.1:0 --report "$work/report.json"
start_learner learner0 0
start_learner learner1 1
expect_exit "$syncer_pid" 240 0 "the syncer"
expect_exit "$learner0_pid" 60 0 "learner 0"
expect_exit "$learner1_pid" 60 0 "learner 1"
for id in 0 1; do
  merged=$(learner_json "$work/report.json" "$id" | grep -o '"merged":[0-9]*' | cut -d: -f2)
  ((${merged:-0} > 0)) || die "learner $id was never merged"
done
echo "three processes of the installed atoll: $(json_number "$work/report.json" tokens) tokens," \
     "$(json_number "$work/report.json" rounds) rounds, both learners merged"
rm -rf "$scratch"
