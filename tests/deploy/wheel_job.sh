#!/usr/bin/env bash
# What a user does with an installed atoll wheel, from a venv that holds it:
#   - every ELF file of the wheel resolves its libraries inside the wheel, or to
#     glibc, libstdc++/libgcc and OpenSSL 3, and the module has no NumPy ABI;
#   - import atoll (NumPy and torch not loaded), an atoll.run() job of atoll's
#     own model, atoll --help;
#   - `atoll syncer` and two `atoll learner` processes of the installed
#     command complete a run, both learners merged.
# wheel_test.sh runs it on this machine (another Python than the build's);
# scripts/bare_debian_check inside a debootstrapped Debian 12 without atoll's libraries.
# Usage: wheel_job.sh VENV SCRATCH (run it from outside the source tree)
set -euo pipefail
venv=$(cd "${1:?usage: wheel_job.sh VENV SCRATCH}" && pwd)
source "$(dirname "$0")/../process/lib.sh" "$venv/bin/atoll" "${2:?usage: wheel_job.sh VENV SCRATCH}"
unset LD_LIBRARY_PATH PYTHONPATH ATOLL_DATA_DIR
cd "$work"
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
synthetic_topology "$work/topology.toml" 30000 2 1.0 ""
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
