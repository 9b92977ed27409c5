#!/usr/bin/env bash
# The learner image for Python learners, built for real (scripts/image
# --learner: this build's wheel on a PyTorch image, which here is Debian 12
# with its own python3-torch, since no registry can be reached), and used:
# its Python writes the model file, the atoll image's syncer serves it
# (model.kind = "external"), and two Python learners, each in a container of
# the learner image (tests/deploy/image_lib.sh), train with atoll.Learner until
# the run is over. Every process exits 0 and both learners are merged.
# Usage: learner_image_test.sh REPO_ROOT BUILD_DIR
# Exit 0 pass, 1 fail, 77 skipped (not root, or podman or debootstrap missing).
set -euo pipefail
repo=$(cd "${1:?usage: learner_image_test.sh REPO_ROOT BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: learner_image_test.sh REPO_ROOT BUILD_DIR}" && pwd)
source "$repo/tests/deploy/image_lib.sh"

"$repo/scripts/wheel" /usr/bin/python3 --build "$build" --out "$scratch/dist" >"$scratch/wheel.log" 2>&1 ||
  die "scripts/wheel failed"
wheel=$(tail -n 1 "$scratch/wheel.log")
images+=("localhost/atoll:$tag" "localhost/atoll-learner:$tag")
"$repo/scripts/image" --wheel "$wheel" --learner --tag "$tag" 2>&1 | tee "$scratch/image.log" | grep '^image: ' || true
podman image exists "localhost/atoll-learner:$tag" || die "scripts/image made no localhost/atoll-learner:$tag"

# The learners' loop: an MLP on random data, as a user's script would be.
cat >"$scratch/etc/learner.py" <<'PY'
import sys
import atoll
import torch

def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

if sys.argv[1] == "save":
    atoll.save_model(model(), "/etc/atoll/model.atoll")
    print("atoll", atoll.__version__, "torch", torch.__version__, "wrote the model file")
    sys.exit(0)
learner_id, syncer = int(sys.argv[1]), sys.argv[2]
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(learner_id)
with atoll.Learner(m, syncer, id=learner_id, token_file="/etc/atoll/token", optimizer=opt) as learner:
    steps = 0
    while True:
        x = torch.randn(16, 8, generator=g)
        loss = torch.nn.functional.cross_entropy(m(x), (x[:, 0] > 0).long())
        opt.zero_grad(); loss.backward(); opt.step()
        steps += 1
        if not learner.step(tokens=16, loss=loss.item()):
            break
    print(f"learner {learner_id}: {steps} steps until the run was over")
PY
start model "localhost/atoll-learner:$tag" -- python3 /etc/atoll/learner.py save
expect_exit "$model_pid" 120 0 "writing the model file in the learner image"
cp "$model_root/etc/atoll/model.atoll" "$scratch/etc/"
cat >"$scratch/etc/topology.toml" <<'TOML'
tokens = 60000
[model]
kind = "external"
path = "/etc/atoll/model.atoll"
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
port=$(free_port)
start syncer "localhost/atoll:$tag" ATOLL_ROLE=syncer ATOLL_SYNCER="127.0.0.1:$port" ATOLL_TOKEN_FILE=/etc/atoll/token \
  ATOLL_TOPOLOGY=/etc/atoll/topology.toml ATOLL_REPORT=/etc/atoll/report.json ATOLL_ARGS="-q -v" -- atoll-node
wait_for syncer "serving learners" 30
for id in 0 1; do
  start "learner$id" "localhost/atoll-learner:$tag" -- python3 /etc/atoll/learner.py "$id" "127.0.0.1:$port"
done
expect_exit "$syncer_pid" 300 0 "the syncer"
expect_exit "$learner0_pid" 60 0 "Python learner 0"
expect_exit "$learner1_pid" 60 0 "Python learner 1"
python3 - "$syncer_root/etc/atoll/report.json" <<'PY' || die "the report breaks an invariant"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["tokens"] >= 60000, r["tokens"]
merged = [l["merged"] for l in r["per_learner"]]
assert len(merged) == 2 and min(merged) > 0, merged
print(f"Python learners in the learner image: {r['tokens']} tokens, {r['rounds']} rounds, merged {merged}")
PY
tail -n 1 "$scratch/learner0.log"
rm -rf "$scratch"
