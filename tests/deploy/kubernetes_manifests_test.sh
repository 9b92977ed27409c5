#!/usr/bin/env bash
# The Kubernetes example (examples/deploy/kubernetes) checked without a
# cluster: every object against the Kubernetes 1.30 API's types, strictly
# (kubernetes-types from npm, which scripts/setup unpacks into
# data/kubernetes-types), and the references between the objects, the
# topology and atoll-node (tests/deploy/kubernetes_manifests.py says which).
# atoll-node --dry-run, given each pod's environment and mounts, must make the
# atoll command line the manifests mean: each syncer shard's pod its own shard
# (--shard i/S) and port, each learner joining every shard, an island's pod
# torchrun over its GPUs (islands.yaml, checked in place of learners.yaml).
# Then broken copies must fail, each
# with its own message: a wrong type, an unknown field, a missing required
# field and broken references.
# `kubectl apply --dry-run=client` is no help here: it fetches the schema from
# a cluster's API server. The Containerfile is built and its image run by
# image_test.sh; here it is
# checked only for what it copies and runs, not built.
# Usage: kubernetes_manifests_test.sh REPO_ROOT SCRATCH
# Exit 0 pass, 1 fail, 77 skipped (the types or PyYAML missing).
# $ATOLL_DATA_DIR: where scripts/setup put the data (default REPO_ROOT/data);
# $ATOLL: an atoll binary, to run `atoll validate` on the topology and to
# check atoll-node's flags against `atoll syncer|learner --help`.
set -euo pipefail

repo=$(cd "${1:?usage: kubernetes_manifests_test.sh REPO_ROOT SCRATCH}" && pwd)
scratch=${2:?usage: kubernetes_manifests_test.sh REPO_ROOT SCRATCH}
types=${ATOLL_DATA_DIR:-$repo/data}/kubernetes-types
example=$repo/examples/deploy/kubernetes
check=$repo/tests/deploy/kubernetes_manifests.py
python=/usr/bin/python3
[ -x "$python" ] || python=python3

die() { echo "FAIL: $*" >&2; exit 1; }
if [ ! -f "$types/batch/v1.d.ts" ]; then
  echo "skip: no Kubernetes types in $types: scripts/setup fetches them (npm kubernetes-types@1.30.0)"
  exit 77
fi
if ! "$python" -c 'import yaml' 2>/dev/null; then
  echo "skip: $python has no PyYAML (Debian: python3-yaml)"
  exit 77
fi

rm -rf "$scratch"
mkdir -p "$scratch"

echo "== $example"
"$python" "$check" "$types" "$example" "$repo" || die "the example's manifests do not pass (above)"

# kubectl, where there is one, builds the kustomization offline.
if command -v kubectl >/dev/null 2>&1; then
  built=$(kubectl kustomize "$example" 2>&1) || die "kubectl kustomize: $built"
  count=$(grep -c '^kind: ' <<<"$built" || true)
  want=0
  for f in "$example"/*.yaml; do
    case ${f##*/} in kustomization.yaml|secrets.example.yaml|islands.yaml) continue ;; esac  # islands.yaml: an alternative
    want=$((want + $(grep -c '^kind: ' "$f" || true)))
  done
  [ "$count" = "$want" ] || die "kubectl kustomize made $count objects, not $want"
  echo "kubectl kustomize: $count objects"
else
  echo "kubectl kustomize: not run (no kubectl)"
fi

# atoll-node as each pod runs it (--dry-run: the atoll command line only), with
# the pod's environment and its mounts laid out under $scratch/ROLE: the
# Secrets with fake files of the pods' mode (0400).
# A variable from the pod's index (the label apps.kubernetes.io/pod-index) is
# INDEX, and $(VAR) takes the value of a variable before it, as Kubernetes does.
node_line() {  # NAME FILE INDEX: prints atoll-node's command line, one word a line
  local role=$1 root=$scratch/$1 vars
  vars=$("$python" - "$example" "$2" "$root" "$3" <<'PY'
import glob, os, re, sys, yaml
folder, name, root, index = sys.argv[1:]
sources = {}  # (kind, name) -> {key: text}, secrets.example.yaml's fake Secrets too
for path in glob.glob(os.path.join(folder, "*.yaml")):
    for o in yaml.safe_load_all(open(path, encoding="utf-8")):
        if (o or {}).get("kind") in ("ConfigMap", "Secret"):
            sources[(o["kind"], o["metadata"]["name"])] = {**(o.get("data") or {}), **(o.get("stringData") or {})}
for o in yaml.safe_load_all(open(os.path.join(folder, name), encoding="utf-8")):
    if (o or {}).get("kind") not in ("StatefulSet", "Job"):
        continue
    spec = o["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    c = spec["containers"][0]
    for m in c.get("volumeMounts") or []:
        where = root + m["mountPath"]
        os.makedirs(where, exist_ok=True)
        v = volumes.get(m["name"], {})
        kind, source = ("Secret", v["secret"]) if "secret" in v else ("ConfigMap", v.get("configMap"))
        if source is None:
            continue  # a claim: an empty folder
        data = sources[(kind, source.get("secretName") or source.get("name"))]
        for item in source.get("items") or [{"key": k, "path": k} for k in data]:
            f = os.path.join(where, item["path"])
            with open(f, "w", encoding="utf-8") as fh:
                fh.write(data[item["key"]])
            os.chmod(f, source.get("defaultMode", 0o644))
    values = {}
    for e in c.get("env") or []:
        if "valueFrom" in e:
            if (e["valueFrom"].get("fieldRef") or {}).get("fieldPath") != "metadata.labels['apps.kubernetes.io/pod-index']":
                sys.exit(f"{e['name']}: no stand-in for {e['valueFrom']}")
            value = index
        else:
            value = re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), e["value"])
        values[e["name"]] = value
        print(f"{e['name']}={root + value if value.startswith('/') else value}")
PY
  ) || { echo "FAIL: cannot lay out the $role pod from $2" >&2; return 1; }
  local env_args=()
  mapfile -t env_args <<<"$vars"
  env -i PATH="$PATH" JOB_COMPLETION_INDEX=2 "${env_args[@]}" bash "$repo/examples/deploy/atoll-node" --dry-run ||
    { echo "FAIL: atoll-node --dry-run refuses the $role pod's environment" >&2; return 1; }
}
expect_words() {  # ROLE LINE WORDS...: each word is in LINE
  local role=$1 line=$2 w
  shift 2
  for w in "$@"; do
    grep -qxF -- "$w" <<<"$line" || die "$role: atoll-node's command has no '$w':"$'\n'"$line"
  done
}
flags_known() {  # ROLE LINE: each --flag is one `atoll ROLE --help` lists
  local role=$1 line=$2 help flag
  [ -n "${ATOLL:-}" ] || return 0
  help=$("$ATOLL" "$role" --help 2>&1)
  while read -r flag; do
    grep -qE -- "(^|[ ,])$flag([ =,]|$)" <<<"$help" || die "$role: atoll $role has no flag $flag"
  done < <(grep -E '^--' <<<"$line")
}
echo "== atoll-node with each pod's environment"
# The syncer's pods 0 and 1: shards 0 and 1 of 2, each on its own volume.
for shard in 0 1; do
  syncer_line=$(node_line "syncer-$shard" syncer.yaml "$shard") || exit 1
  expect_words "syncer pod $shard" "$syncer_line" syncer "$scratch/syncer-$shard/etc/atoll/topology/topology.toml" \
    0.0.0.0:7070 atoll-run --shard "$shard/2" "checkpoint.dir=$scratch/syncer-$shard/var/lib/atoll/checkpoints" \
    "$scratch/syncer-$shard/etc/atoll/tls/syncer.key" --metrics-public
  flags_known syncer "$syncer_line"
  echo "syncer pod $shard: $(tr '\n' ' ' <<<"$syncer_line")"
done
# The learner of index 2 (JOB_COMPLETION_INDEX) joins both shards, shard 0 first.
learner_line=$(node_line learner learners.yaml 2) || exit 1
expect_words learner "$learner_line" learner atoll-syncer-0.atoll-syncer:7070,atoll-syncer-1.atoll-syncer:7070 \
  --id 2 300 "$scratch/learner/etc/atoll/tls/learner.key" --threads --metrics-public
flags_known learner "$learner_line"
echo "learner: $(tr '\n' ' ' <<<"$learner_line")"
# An island's pod (islands.yaml, in place of learners.yaml): torchrun over its 8 GPUs, each rank running the
# script from the image (laid out here), the syncer's shards and its id exported to the ranks.
mkdir -p "$scratch/island/opt" && touch "$scratch/island/opt/train.py"
island_line=$(node_line island islands.yaml 2) || exit 1
expect_words island "$island_line" torchrun --nproc_per_node 8 --max_restarts 3 "$scratch/island/opt/train.py" --lr 3e-4
echo "island: $(tr '\n' ' ' <<<"$island_line")"

# broken NAME FILE OLD NEW EXPECTED: a copy with OLD replaced by NEW in FILE
# must fail, and say EXPECTED.
broken() {
  local name=$1 file=$2 old=$3 new=$4 expected=$5 copy=$scratch/$1 out status=0
  cp -r "$example" "$copy"
  "$python" - "$copy/$file" "$old" "$new" <<'PY' || die "$name: the text to break is not in $file"
import sys
path, old, new = sys.argv[1:]
text = open(path, encoding="utf-8").read()
if old not in text:
    sys.exit(1)
open(path, "w", encoding="utf-8").write(text.replace(old, new, 1))
PY
  out=$(ATOLL='' "$python" "$check" "$types" "$copy" 2>&1) || status=$?
  [ "$status" = 1 ] || die "$name: exited $status, not 1:"$'\n'"$out"
  grep -qF -- "$expected" <<<"$out" || die "$name: no '$expected' in:"$'\n'"$out"
  echo "$name: $(grep -F -- "$expected" <<<"$out" | head -n 1)"
}

echo "== broken copies (each must fail)"
broken island-gpus islands.yaml "nvidia.com/gpu: 8" "nvidia.com/gpu: 4" \
  'ATOLL_ISLAND_SIZE is 8 but the pod has 4 GPUs: one rank a GPU'
broken island-shm islands.yaml "medium: Memory" 'medium: ""' \
  'no memory-backed /dev/shm'
broken wrong-type learners.yaml "containerPort: 9464" 'containerPort: "x"' \
  'ports[0].containerPort: expected number, got string "x"'
broken unknown-field learners.yaml "readinessProbe:" "readinesProbe:" \
  'unknown field "readinesProbe" (Container has no such field)'
broken missing-required syncer.yaml $'        - name: syncer\n          image:' $'        - image:' \
  'containers[0]: missing required field "name" (Container)'
broken list-for-map syncer.yaml "accessModes: [ReadWriteOnce]" "accessModes: ReadWriteOnce" \
  'accessModes: expected a list, got string "ReadWriteOnce"'
broken no-such-secret learners.yaml "secretName: atoll-tls" "secretName: atoll-tsl" \
  'Secret atoll-tsl is neither in the bundle nor in secrets.example.yaml'
broken no-such-key syncer.yaml "key: syncer.key" "key: server.key" \
  'Secret atoll-tls has no key server.key'
broken probe-port learners.yaml $'path: /readyz\n              port: metrics' $'path: /readyz\n              port: 9465' \
  'readinessProbe: port 9465 is none of the container'
broken probe-exec syncer.yaml "command: [atoll-node, --probe, /readyz]" "command: [atoll-node, --probe, /healthz]" \
  "readinessProbe: exec ['atoll-node', '--probe', '/healthz'], expected"
broken on-signal syncer.yaml $'value: pause ' $'value: end ' \
  'SIGTERM on the syncer'"'"'s pod (a drain) would end the run'
broken leave-status learners.yaml $'name: ATOLL_LEAVE_STATUS  # SIGTERM (a drained node): leave in order, then 75, and the\n              value: "75"' $'name: ATOLL_LEAVE_STATUS\n              value: "0"' \
  'ATOLL_LEAVE_STATUS is 0: a drained learner exits 0'
broken selector syncer.yaml \
  $'    matchLabels:\n      app.kubernetes.io/name: atoll\n      app.kubernetes.io/component: syncer' \
  $'    matchLabels:\n      app.kubernetes.io/name: atoll\n      app.kubernetes.io/component: learner' \
  "does not match its pods' labels"
broken syncer-address learners.yaml "value: atoll-syncer-0.atoll-syncer:7070,atoll-syncer-1.atoll-syncer:7070" \
  "value: atoll-syncer:7070" 'ATOLL_SYNCER is atoll-syncer:7070, not every shard'"'"'s stable name'
broken one-shard-joined learners.yaml ",atoll-syncer-1.atoll-syncer:7070" "" \
  'ATOLL_SYNCER is atoll-syncer-0.atoll-syncer:7070, not every shard'"'"'s stable name, shard 0 first'
broken shards-order syncer.yaml "value: atoll-syncer-0.atoll-syncer:7070,atoll-syncer-1.atoll-syncer:7070" \
  "value: atoll-syncer-1.atoll-syncer:7070,atoll-syncer-0.atoll-syncer:7070" \
  'ATOLL_SYNCER is atoll-syncer-1.atoll-syncer:7070,atoll-syncer-0.atoll-syncer:7070, not every shard'
broken replicas syncer.yaml "replicas: 2 " "replicas: 1 " \
  'replicas is 1, but the topology has syncer.shards = 2'
broken ordered-shards syncer.yaml "podManagementPolicy: Parallel" "podManagementPolicy: OrderedReady" \
  'podManagementPolicy is not Parallel'
broken shard-count syncer.yaml 'value: $(POD_INDEX)/2' 'value: $(POD_INDEX)/3' \
  'ATOLL_SHARD is $(POD_INDEX)/3, but the topology has syncer.shards = 2'
broken shard-index syncer.yaml "fieldPath: metadata.labels['apps.kubernetes.io/pod-index']" \
  "fieldPath: metadata.name" "ATOLL_SHARD's POD_INDEX is not the pod's index"
broken shared-checkpoints syncer.yaml "value: /var/lib/atoll/checkpoints" "value: /etc/atoll/topology/checkpoints" \
  'ATOLL_CHECKPOINT_DIR=/etc/atoll/topology/checkpoints is not on a volumeClaimTemplate: the shards would share it'
broken token-path syncer.yaml "value: /etc/atoll/token/token" "value: /etc/atoll/token/cluster-token" \
  'Secret atoll-token mounted at /etc/atoll/token has no file cluster-token'
broken annotation-number syncer.yaml 'prometheus.io/port: "9464"' 'prometheus.io/port: 9464' \
  'metadata.annotations.prometheus.io/port: expected string, got number 9464'
broken completions learners.yaml "completions: 3" "completions: 4" \
  'completions is 4, but the topology has 3 [[learners]]'
broken exit-code learners.yaml "values: [77]" "values: [76]" \
  'exit 77 should be FailIndex'
broken fake-secrets kustomization.yaml "  - learners.yaml" $'  - learners.yaml\n  - secrets.example.yaml' \
  'its fake Secrets would replace the real ones'
echo "PASS: the Kubernetes example's manifests (a syncer in 2 shards), and 24 broken copies refused"
