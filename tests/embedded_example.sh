#!/usr/bin/env bash
# Installs atoll from this build into a scratch prefix, builds
# examples/embedded against the installed CMake package (find_package(atoll)),
# and runs it briefly. Usage: embedded_example.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
prefix="$build/embedded-install"
out="$build/embedded-build"
rm -rf "$prefix" "$out"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/examples/embedded" -B "$out" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$out" -j2 >/dev/null
"$out/trainer_service" --seconds 2 --report "$out/report.json" | tee "$out/output.txt"
grep -q '^health: ' "$out/output.txt"
grep -q 'held-out accuracy' "$out/output.txt"
grep -q '^metrics: atoll_tokens_total and its own in the service' "$out/output.txt"
grep -q '"mode":"decoupled"' "$out/report.json"
# The Python package, where the prefix's site folder is (when the build has it): it imports and runs there.
for site in "$prefix"/lib/python3*/dist-packages; do
  [[ -d "$site/atoll" ]] || continue
  PYTHONPATH="$site" /usr/bin/python3 -c "import atoll, sys; sys.exit(0 if atoll.Topology()['mode'] == 'decoupled' else 1)"
  echo "embedded example: the installed Python package imports from $site"
done
echo "embedded example: built against the installed package and ran"
