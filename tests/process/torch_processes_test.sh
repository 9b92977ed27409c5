#!/usr/bin/env bash
# A TorchScript model across real processes: `atoll run --processes` trains
# it (syncer and learners each load the module), and a learner whose module
# file differs from the syncer's is refused by its layout fingerprint.
# Usage: torch_processes_test.sh ATOLL SCRATCH MODULES (tests/fixtures/torch/make_modules.py)
source "$(dirname "$0")/lib.sh" "$1" "$2"
modules=$3
[[ -s "$modules/classifier.pt" && -s "$modules/classifier_wide.pt" ]] ||
  { echo "SKIPPED: $modules has no modules (make_modules.py needs python3-torch)"; exit 77; }

# The tests' synthetic classifier (4 features, 3 classes) as a TorchScript module.
torch_topology() {  # FILE TOKENS MODULE
  write_topology "$1" "$2"
  sed -i "s|^kind = \"mlp\"|kind = \"torchscript\"\npath = \"$3\"|; s|^features = 16|features = 4|; s|^classes = 4|classes = 3|; s|^speed = 0.05|speed = 0.5|" "$1"
}

# 1. The whole run as processes: every learner trains, the report has the held-out loss.
torch_topology "$work/run.toml" 60000 "$modules/classifier.pt"
status=0
"$atoll" run "$work/run.toml" --processes --report "$work/run.json" >"$work/run.log" 2>&1 || status=$?
((status == 0)) || die "atoll run --processes exited with $status"
grep -q '"model":"torchscript' "$work/run.json" || die "the report does not name the torchscript model"
for id in 0 1; do
  steps=$(learner_json "$work/run.json" "$id" | grep -o '"steps":[0-9]*' | cut -d: -f2)
  ((${steps:-0} > 0)) || die "learner $id took no step"
done
loss=$(json_number "$work/run.json" loss)
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 1.0986) }' || die "held-out loss $loss is not below ln 3 (chance)"

# 2. A learner whose module differs: the syncer (in folder a/) and the learner
# (in folder b/) read the same relative path, m.pt, holding other modules.
mkdir -p "$work/a" "$work/b"
cp "$modules/classifier.pt" "$work/a/m.pt"
cp "$modules/classifier_wide.pt" "$work/b/m.pt"
torch_topology "$work/a/topo.toml" 1000000000 m.pt
cd "$work/a"
start_syncer syncer "$work/a/topo.toml" --listen 127.0.0.1:0 --report "$work/syncer.json"
cd "$work/b"
status=0
"$atoll" learner --join "127.0.0.1:$port" --id 0 --threads 1 >"$work/other_model.log" 2>&1 || status=$?
((status == 77)) || die "a learner with another module exited with $status, not 77"
grep -q "fingerprint" "$work/other_model.log" || die "no fingerprint reason for a learner with another module"
kill -0 "$syncer_pid" 2>/dev/null || die "the syncer died"
stop_run "$syncer_pid"
expect_exit "$syncer_pid" 60 0 "the syncer"
echo "torch_processes_test: ok"
