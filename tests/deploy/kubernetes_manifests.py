#!/usr/bin/python3
"""Checks the Kubernetes manifests of examples/deploy/kubernetes without a cluster.

Usage: kubernetes_manifests.py TYPES_DIR MANIFEST_DIR [REPO_ROOT]

TYPES_DIR is the kubernetes-types npm package (scripts/setup unpacks it into
data/kubernetes-types): the types of the Kubernetes 1.30 API, one TypeScript
declaration per group and version, generated from the API's OpenAPI document.
They give every object's fields, each field's type and which are required.

1. Schema, strict: every object in kustomization.yaml's resources and in
   secrets.example.yaml is checked against its kind's type. A field the type
   lacks, a value of the wrong type (a string where a number goes, a map where
   a list goes) and a required field that is absent are errors. As the API
   server does, a Quantity or an IntOrString takes a number or a string.
   Names follow the API's patterns (objects and containers: DNS labels;
   ports: at most 15 characters). Not checked: which values a string may
   take (the types say only "string"), whole against fractional numbers, and
   the API server's rules between fields.
2. Cross-references: every ConfigMap, Secret (with the keys it projects) and
   claim a pod mounts exists; every mount names a volume; every probe, Service
   targetPort and scrape annotation names a container port; selectors match
   their pods' labels and only those; the syncer StatefulSet runs one pod
   per shard of the topology's syncer.shards (replicas; more than one:
   podManagementPolicy Parallel, ATOLL_SHARD = $(index)/S with the index from
   the pod-index label, ATOLL_CHECKPOINT_DIR and ATOLL_REPORT on the pod's own
   claim); the syncer's and the learners' ATOLL_SYNCER list every shard's
   stable name <StatefulSet>-<i>.<Service>:<learners port>, shard 0 first;
   every path
   in an ATOLL_* variable lies on a mounted volume, and a file on a ConfigMap
   or Secret volume is one of its keys; the Job's completions and parallelism
   equal the topology's [[learners]]; podFailurePolicy maps atoll-node's exit
   codes (77 FailIndex, 2 FailJob, 75 Ignore, DisruptionTarget Ignore).
   islands.yaml, the alternative to learners.yaml, is checked in its place:
   its ATOLL_ISLAND_SIZE is the pod's GPUs, it names a script, it has a
   memory-backed /dev/shm, and its pods exit as torchrun does (no exit-code
   rules but DisruptionTarget Ignore).
3. With REPO_ROOT: every ATOLL_* variable the manifests set is one that
   examples/deploy/atoll-node reads, and the Containerfile copies every
   source folder CMakeLists.txt always adds. With $ATOLL (an atoll binary):
   `atoll validate` accepts the topology.

Prints each failure as FILE: OBJECT: PATH: what, and exits 1 if there was
any, else 0. Needs PyYAML (python3-yaml); tomllib is Python 3.11's.
"""

import os
import re
import subprocess
import sys
import tempfile
import tomllib

import yaml

# --- the Kubernetes types, from kubernetes-types' .d.ts files -----------------------------------


class Types:
    """Interfaces and aliases of every module (e.g. "core/v1"), with imports resolved."""

    def __init__(self, root):
        self.interfaces = {}  # (module, name) -> {field: (type, required)}
        self.aliases = {}  # (module, name) -> type
        self.scopes = {}  # module -> {name: (module, name)}
        self.kinds = {}  # (apiVersion, kind) -> (module, name)
        for dirpath, _, files in os.walk(root):
            for f in files:
                if f.endswith(".d.ts"):
                    path = os.path.join(dirpath, f)
                    self._load(os.path.relpath(path, root)[: -len(".d.ts")], path)
        if not self.kinds:
            raise ValueError(f"{root}: no Kubernetes kinds found in its .d.ts files")

    def _load(self, module, path):
        with open(path, encoding="utf-8") as fh:
            text = re.sub(r"/\*.*?\*/", " ", fh.read(), flags=re.S)
        scope = self.scopes.setdefault(module, {})
        for names, source in re.findall(r'import\s*\{([^}]*)\}\s*from\s*"([^"]+)"', text):
            other = os.path.normpath(os.path.join(os.path.dirname(module), source))
            for n in names.split(","):
                scope[n.strip()] = (other, n.strip())
        for name, body in re.findall(r"export\s+type\s+(\w+)\s*=\s*([^;]+);", text):
            scope[name] = (module, name)
            self.aliases[(module, name)] = parse_type(body)
        pos = 0
        while True:
            m = re.compile(r"export\s+interface\s+(\w+)\s*\{").search(text, pos)
            if not m:
                break
            end = matching_brace(text, m.end() - 1)
            fields = {}
            for member in split_top(text[m.end() : end], ";"):
                member = member.strip()
                if not member:
                    continue
                mm = re.match(r"""^(?:readonly\s+)?(?:"([^"]+)"|'([^']+)'|([\w$-]+))(\?)?\s*:\s*(.+)$""", member, re.S)
                if not mm:
                    raise ValueError(f"{path}: cannot read the member '{member[:60]}'")
                fname = mm.group(1) or mm.group(2) or mm.group(3)
                fields[fname] = (parse_type(mm.group(5)), mm.group(4) is None)
            scope[m.group(1)] = (module, m.group(1))
            self.interfaces[(module, m.group(1))] = fields
            api, kind = fields.get("apiVersion"), fields.get("kind")
            if api and kind and api[0][0] == "lit" and kind[0][0] == "lit":
                self.kinds[(api[0][1], kind[0][1])] = (module, m.group(1))
            pos = end + 1

    def resolve(self, module, name):
        return self.scopes.get(module, {}).get(name)


def matching_brace(text, i):
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced braces")


def split_top(text, sep):
    """Splits at sep outside braces, brackets and angle brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[<(":
            depth += 1
        elif ch in "}]>)":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def parse_type(t):
    """A TypeScript type expression as a tuple: ("prim", p), ("lit", v), ("ref", name),
    ("array", T), ("map", T), ("union", [T...])."""
    t = " ".join(t.split())
    alts = [a.strip() for a in split_top(t, "|")]
    if len(alts) > 1:
        return ("union", [parse_type(a) for a in alts])
    if t in ("string", "number", "boolean", "any", "object"):
        return ("prim", t)
    if re.fullmatch(r'"[^"]*"', t):
        return ("lit", t[1:-1])
    m = re.fullmatch(r"Array<(.+)>", t)
    if m:
        return ("array", parse_type(m.group(1)))
    if t.endswith("[]"):
        return ("array", parse_type(t[:-2]))
    m = re.fullmatch(r"\{\s*\[\w+:\s*string\]:\s*(.+?);?\s*\}", t)
    if m:
        return ("map", parse_type(m.group(1)))
    if re.fullmatch(r"\w+", t):
        return ("ref", t)
    raise ValueError(f"unknown type expression '{t}'")


# Types that the OpenAPI document marks int-or-string: the API server takes either.
INT_OR_STRING = {"Quantity"}


def describe(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {v}"
    if isinstance(v, (int, float)):
        return f"number {v}"
    if isinstance(v, str):
        return f'string "{v}"'
    if isinstance(v, list):
        return "a list"
    return "a map"


class Validator:
    def __init__(self, types):
        self.types = types
        self.errors = []

    def check(self, value, t, module, path):
        kind = t[0]
        if kind == "prim":
            p = t[1]
            ok = {
                "string": isinstance(value, str),
                "number": isinstance(value, (int, float)) and not isinstance(value, bool),
                "boolean": isinstance(value, bool),
            }.get(p, True)
            if not ok:
                self.errors.append(f"{path}: expected {p}, got {describe(value)}")
        elif kind == "lit":
            if value != t[1]:
                self.errors.append(f'{path}: expected "{t[1]}", got {describe(value)}')
        elif kind == "array":
            if not isinstance(value, list):
                self.errors.append(f"{path}: expected a list, got {describe(value)}")
                return
            for i, item in enumerate(value):
                self.check(item, t[1], module, f"{path}[{i}]")
        elif kind == "map":
            if not isinstance(value, dict):
                self.errors.append(f"{path}: expected a map, got {describe(value)}")
                return
            for k, item in value.items():
                if not isinstance(k, str):
                    self.errors.append(f"{path}: key {describe(k)} is not a string")
                self.check(item, t[1], module, f"{path}.{k}")
        elif kind == "union":
            for alt in t[1]:
                trial = Validator(self.types)
                trial.check(value, alt, module, path)
                if not trial.errors:
                    return
            self.errors.append(f"{path}: {describe(value)} is none of {render(t)}")
        elif kind == "ref":
            target = self.types.resolve(module, t[1])
            if target is None:
                raise ValueError(f"{module}: unknown type {t[1]}")
            if target in self.types.aliases:
                alias = self.types.aliases[target]
                if target[1] in INT_OR_STRING:
                    alias = ("union", [("prim", "number"), ("prim", "string")])
                self.check(value, alias, target[0], path)
            else:
                self.check_object(value, target, path)

    def check_object(self, value, target, path):
        fields = self.types.interfaces[target]
        if not isinstance(value, dict):
            self.errors.append(f"{path}: expected a map ({target[1]}), got {describe(value)}")
            return
        if not fields:  # RawExtension and the like: any object
            return
        for k, v in value.items():
            if k not in fields:
                self.errors.append(f'{path}: unknown field "{k}" ({target[1]} has no such field)')
            elif v is not None:
                self.check(v, fields[k][0], target[0], f"{path}.{k}" if path else k)
        for k, (_, required) in fields.items():
            if required and value.get(k) is None:
                self.errors.append(f'{path}: missing required field "{k}" ({target[1]})')


def render(t):
    if t[0] in ("prim", "ref"):
        return t[1]
    if t[0] == "lit":
        return f'"{t[1]}"'
    if t[0] == "array":
        return f"Array<{render(t[1])}>"
    if t[0] == "map":
        return f"map of {render(t[1])}"
    return " | ".join(render(a) for a in t[1])


# --- the bundle ---------------------------------------------------------------------------------


# Files a user swaps in for a resource of kustomization.yaml: islands.yaml for learners.yaml. Each is
# checked as the bundle with it in place of the file it replaces.
ALTERNATIVES = {"islands.yaml": "learners.yaml"}


class Bundle:
    def __init__(self, folder, swap=None):
        self.folder = folder
        self.failures = []
        self.objects = []  # (file, object), in the kustomization's order, then the example Secrets
        kust_path = os.path.join(folder, "kustomization.yaml")
        with open(kust_path, encoding="utf-8") as fh:
            self.kustomization = yaml.safe_load(fh)
        listed = self.kustomization.get("resources") or []
        present = sorted(
            f for f in os.listdir(folder)
            if f.endswith((".yaml", ".yml")) and f not in ("kustomization.yaml", "secrets.example.yaml")
        )
        for f in present:
            if f not in listed and not (f in ALTERNATIVES and ALTERNATIVES[f] in listed):
                self.fail("kustomization.yaml", f"{f} is not among its resources")
        resources = [swap if swap and f == ALTERNATIVES[swap] else f for f in listed]
        if "secrets.example.yaml" in resources:
            self.fail("kustomization.yaml", "lists secrets.example.yaml: its fake Secrets would replace the real ones")
        for f in resources + ["secrets.example.yaml"]:
            path = os.path.join(folder, f)
            if not os.path.isfile(path):
                self.fail("kustomization.yaml", f"resource {f} does not exist")
                continue
            with open(path, encoding="utf-8") as fh:
                try:
                    docs = [d for d in yaml.safe_load_all(fh) if d is not None]
                except yaml.YAMLError as e:
                    self.fail(f, f"not YAML: {e}")
                    continue
            for d in docs:
                self.objects.append((f, d))

    def fail(self, where, what):
        self.failures.append(f"{where}: {what}")

    def named(self, kind, name):
        return [o for f, o in self.objects if o.get("kind") == kind and (o.get("metadata") or {}).get("name") == name]

    def of_kind(self, kind):
        return [(f, o) for f, o in self.objects if o.get("kind") == kind]


def label(f, o):
    return f"{f}: {o.get('kind')} {(o.get('metadata') or {}).get('name')}"


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
PORT_NAME = re.compile(r"^(?=.{1,15}$)(?=.*[a-z])[a-z0-9]+(-[a-z0-9]+)*$")  # IANA_SVC_NAME


def check_names(bundle, f, o):
    """The names the API server checks by pattern: objects, containers, ports."""
    name = get(o, "metadata", "name")
    if isinstance(name, str) and not DNS_LABEL.match(name):
        bundle.fail(label(f, o), f"metadata.name {name} is not a DNS label (lower case, digits, '-')")
    containers = get(o, "spec", "template", "spec", "containers", default=[])
    for c in containers if isinstance(containers, list) else []:
        if isinstance(c.get("name"), str) and not DNS_LABEL.match(c["name"]):
            bundle.fail(label(f, o), f"container name {c['name']} is not a DNS label")
        for p in c.get("ports") or []:
            if isinstance(p.get("name"), str) and not PORT_NAME.match(p["name"]):
                bundle.fail(label(f, o), f"port name {p['name']}: at most 15 lower-case letters, digits and '-'")


def check_schema(bundle, types):
    for f, o in bundle.objects:
        if not isinstance(o, dict):
            bundle.fail(f, f"a document is {describe(o)}, not an object")
            continue
        check_names(bundle, f, o)
        target = types.kinds.get((o.get("apiVersion"), o.get("kind")))
        if target is None:
            bundle.fail(label(f, o), f"apiVersion {o.get('apiVersion')} kind {o.get('kind')} is no Kubernetes 1.30 kind")
            continue
        v = Validator(types)
        v.check_object(o, target, "")
        for e in v.errors:
            bundle.fail(label(f, o), e.lstrip(": ") if e.startswith(": ") else e)


def get(o, *keys, default=None):
    for k in keys:
        if isinstance(o, dict):
            o = o.get(k)
        elif isinstance(o, list) and isinstance(k, int) and k < len(o):
            o = o[k]
        else:
            return default
        if o is None:
            return default
    return o


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def source_keys(bundle, kind, name):
    """The keys of a ConfigMap or Secret of the bundle (None if there is none)."""
    found = bundle.named(kind, name)
    if not found:
        return None
    o = found[0]
    return set((o.get("data") or {}).keys()) | set((o.get("stringData") or {}).keys()) | set(
        (o.get("binaryData") or {}).keys())


def check_pods(bundle):
    """Volumes, mounts, ports, probes, annotations and ATOLL_* paths of every pod template."""
    pods = {}  # workload name -> (file, workload, pod template)
    for kind in ("StatefulSet", "Job", "Deployment", "DaemonSet"):
        for f, o in bundle.of_kind(kind):
            pods[get(o, "metadata", "name")] = (f, o, get(o, "spec", "template", default={}))
    for name, (f, o, template) in pods.items():
        where = label(f, o)
        spec = template.get("spec") or {}
        claims = {get(c, "metadata", "name") for c in get(o, "spec", "volumeClaimTemplates", default=[])}
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        for vname, v in volumes.items():
            if "configMap" in v or "secret" in v:
                kind, ref = ("ConfigMap", v["configMap"].get("name")) if "configMap" in v else (
                    "Secret", v["secret"].get("secretName"))
                keys = source_keys(bundle, kind, ref)
                if keys is None:
                    bundle.fail(where, f"volume {vname}: {kind} {ref} is neither in the bundle nor in secrets.example.yaml")
                    continue
                items = (v.get("configMap") or v.get("secret")).get("items") or []
                for it in items:
                    if it.get("key") not in keys:
                        bundle.fail(where, f"volume {vname}: {kind} {ref} has no key {it.get('key')}")
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"].get("claimName")
                if not bundle.named("PersistentVolumeClaim", claim):
                    bundle.fail(where, f"volume {vname}: PersistentVolumeClaim {claim} is not in the bundle")
        for vname in claims & set(volumes):
            bundle.fail(where, f"{vname} is both a volume and a volumeClaimTemplate")
        metrics_ports = set()
        for c in spec.get("containers") or []:
            cwhere = f"{where}: container {c.get('name')}"
            ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
            numbers = set(ports.values())
            mounts = {}
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes and m.get("name") not in claims:
                    bundle.fail(cwhere, f"mount {m.get('mountPath')}: no volume or claim named {m.get('name')}")
                mounts[m.get("mountPath")] = m.get("name")
            env = {e.get("name"): e.get("value") for e in c.get("env") or []}
            metrics = env.get("ATOLL_METRICS")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                command = get(c, probe, "exec", "command")
                if command is not None:
                    # atoll-node --probe PATH asks atoll's status server on ATOLL_METRICS's port.
                    want = "/readyz" if probe == "readinessProbe" else "/healthz"
                    if command != ["atoll-node", "--probe", want]:
                        bundle.fail(cwhere, f"{probe}: exec {command}, expected ['atoll-node', '--probe', '{want}']")
                    if not metrics:
                        bundle.fail(cwhere, f"{probe}: atoll-node --probe needs ATOLL_METRICS")
                    else:
                        metrics_ports.add(int(metrics.rsplit(":", 1)[1]))
                    continue
                port = get(c, probe, "httpGet", "port")
                if port is None:
                    port = get(c, probe, "tcpSocket", "port")
                if port is None:
                    continue
                if (isinstance(port, str) and port not in ports) or (isinstance(port, int) and port not in numbers):
                    bundle.fail(cwhere, f"{probe}: port {port} is none of the container's ports {sorted(ports)}")
                metrics_ports.add(ports.get(port, port))
            if metrics and int(metrics.rsplit(":", 1)[1]) not in numbers:
                bundle.fail(cwhere, f"ATOLL_METRICS {metrics}: its port is none of the container's ports")
            for var, value in env.items():
                if var == "ATOLL_ISLAND_SCRIPT":
                    continue  # an island's script and its arguments: in the image, as a rule
                if var.startswith("ATOLL_") and isinstance(value, str) and value.startswith("/"):
                    check_path(bundle, cwhere, var, value, mounts, volumes, claims)
        annotations = get(template, "metadata", "annotations", default={})
        if annotations.get("prometheus.io/scrape") == "true":
            port = annotations.get("prometheus.io/port")
            if not port or int(port) not in metrics_ports:
                bundle.fail(where, f"prometheus.io/port {port} is not the port the probes ask ({sorted(metrics_ports)})")
        selector = get(o, "spec", "selector", "matchLabels")
        if selector and not selects(selector, get(template, "metadata", "labels", default={})):
            bundle.fail(where, f"spec.selector {selector} does not match its pods' labels")
    return pods


def check_path(bundle, where, var, path, mounts, volumes, claims):
    best = max((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), key=len, default=None)
    if best is None:
        bundle.fail(where, f"{var}={path} is on no mounted volume")
        return
    v = volumes.get(mounts[best]) or {}
    source = v.get("configMap") or v.get("secret")
    if source is None:
        return
    rest = path[len(best):].strip("/")
    if not rest:
        return  # the folder itself (ATOLL_TLS_DIR)
    items = source.get("items")
    kind, ref = ("ConfigMap", source.get("name")) if "configMap" in v else ("Secret", source.get("secretName"))
    names = {it.get("path") for it in items} if items else source_keys(bundle, kind, ref) or set()
    if rest not in names:
        bundle.fail(where, f"{var}={path}: {kind} {ref} mounted at {best} has no file {rest}")


def check_services(bundle, pods):
    for f, svc in bundle.of_kind("Service"):
        where = label(f, svc)
        selector = get(svc, "spec", "selector", default={})
        chosen = [(n, t) for n, (_, _, t) in pods.items() if selects(selector, get(t, "metadata", "labels", default={}))]
        if len(chosen) != 1:
            bundle.fail(where, f"its selector {selector} matches the pods of {[n for n, _ in chosen]}, not of one workload")
            continue
        containers = get(chosen[0][1], "spec", "containers", default=[])
        names = {p.get("name") for c in containers for p in c.get("ports") or []}
        numbers = {p.get("containerPort") for c in containers for p in c.get("ports") or []}
        for p in get(svc, "spec", "ports", default=[]):
            target = p.get("targetPort", p.get("port"))
            if (isinstance(target, str) and target not in names) or (isinstance(target, int) and target not in numbers):
                bundle.fail(where, f"port {p.get('name')}: targetPort {target} is no port of {chosen[0][0]}")


def env_of(workload):
    """The first container's environment of a workload's pods (a variable from valueFrom: None)."""
    env = get(workload, "spec", "template", "spec", "containers", 0, "env", default=[])
    return {e.get("name"): e.get("value") for e in env}


POD_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"


def check_shards(bundle, where, sts, shards):
    """One syncer pod per shard: its index is the shard, its claim holds the shard's checkpoints."""
    replicas = get(sts, "spec", "replicas")
    if replicas != shards:
        bundle.fail(where, f"replicas is {replicas}, but the topology has syncer.shards = {shards}: one syncer pod "
                           "per shard")
    if shards == 1:
        return
    if get(sts, "spec", "podManagementPolicy") != "Parallel":
        bundle.fail(where, "podManagementPolicy is not Parallel: a shard would wait for the one before it to be "
                           "ready, and the learners for every shard")
    env = get(sts, "spec", "template", "spec", "containers", 0, "env", default=[])
    shard = next((e for e in env if e.get("name") == "ATOLL_SHARD"), None)
    m = re.fullmatch(r"\$\((\w+)\)/(\d+)", str((shard or {}).get("value")))
    if not m:
        bundle.fail(where, f"ATOLL_SHARD is {(shard or {}).get('value')}, not $(VAR)/{shards} with VAR the pod's index")
        return
    if int(m.group(2)) != shards:
        bundle.fail(where, f"ATOLL_SHARD is {shard['value']}, but the topology has syncer.shards = {shards}")
    # Kubernetes expands $(VAR) only from a variable defined before it.
    index = next((e for e in env[:env.index(shard)] if e.get("name") == m.group(1)), None)
    if get(index, "valueFrom", "fieldRef", "fieldPath") != POD_INDEX:
        bundle.fail(where, f"ATOLL_SHARD's {m.group(1)} is not the pod's index defined before it "
                           f"(valueFrom.fieldRef.fieldPath: {POD_INDEX})")
    claims = {get(c, "metadata", "name") for c in get(sts, "spec", "volumeClaimTemplates", default=[])}
    mounts = {mm.get("mountPath"): mm.get("name")
              for mm in get(sts, "spec", "template", "spec", "containers", 0, "volumeMounts", default=[])}
    for var in ("ATOLL_CHECKPOINT_DIR", "ATOLL_REPORT"):
        path = env_of(sts).get(var)
        if not path:
            continue
        best = max((mp for mp in mounts if path == mp or path.startswith(mp.rstrip("/") + "/")), key=len, default=None)
        if mounts.get(best) not in claims:
            bundle.fail(where, f"{var}={path} is not on a volumeClaimTemplate: the shards would share it")


def check_atoll(bundle):
    """What the run needs: the syncer's stable name, the topology's learners, the exit codes."""
    sets = [(f, o) for f, o in bundle.of_kind("StatefulSet") if env_of(o).get("ATOLL_ROLE") == "syncer"]
    jobs = [(f, o) for f, o in bundle.of_kind("Job") if env_of(o).get("ATOLL_ROLE") == "learner"]
    if len(sets) != 1 or len(jobs) != 1:
        bundle.fail("bundle", f"want one syncer StatefulSet and one learner Job, found {len(sets)} and {len(jobs)}")
        return
    (sf, sts), (jf, job) = sets[0], jobs[0]
    swhere, jwhere = label(sf, sts), label(jf, job)
    service_name = get(sts, "spec", "serviceName")
    services = bundle.named("Service", service_name)
    if not services:
        bundle.fail(swhere, f"serviceName {service_name}: no such Service")
        return
    service = services[0]
    if get(service, "spec", "clusterIP") != "None":
        bundle.fail(label(sf, service), "not headless (clusterIP: None): the syncer pod would have no stable DNS name")

    topo_path = env_of(sts).get("ATOLL_TOPOLOGY")
    topo_map = next((o for _, o in bundle.of_kind("ConfigMap") if "topology.toml" in (o.get("data") or {})), None)
    if topo_map is None:
        bundle.fail("bundle", "no ConfigMap holds topology.toml")
        return
    try:
        topology = tomllib.loads(topo_map["data"]["topology.toml"])
    except tomllib.TOMLDecodeError as e:
        bundle.fail(label("topology", topo_map), f"topology.toml is not TOML: {e}")
        return
    shards = (topology.get("syncer") or {}).get("shards", 1)
    check_shards(bundle, swhere, sts, shards)
    learners_port = {p.get("name"): p.get("port") for p in get(service, "spec", "ports", default=[])}.get("learners")
    # Every shard's pod by its stable name, shard 0 first: a learner joins them all.
    stable = ",".join(f"{sts['metadata']['name']}-{i}.{service_name}:{learners_port}" for i in range(shards))
    for where, o in ((swhere, sts), (jwhere, job)):
        syncer = env_of(o).get("ATOLL_SYNCER")
        if syncer != stable:
            bundle.fail(where, f"ATOLL_SYNCER is {syncer}, not every shard's stable name, shard 0 first: {stable}")
    ports = get(sts, "spec", "template", "spec", "containers", 0, "ports", default=[])
    container_ports = {p.get("containerPort") for p in ports}
    if learners_port not in container_ports:
        bundle.fail(swhere, f"the Service's learners port {learners_port} is not a port of the syncer container")
    learners = len(topology.get("learners") or [])
    spec = job.get("spec") or {}
    lenv = {e.get("name"): e.get("value") for e in get(spec, "template", "spec", "containers", 0, "env", default=[])}
    island = "ATOLL_ISLAND_SIZE" in lenv
    for key in ("completions", "parallelism"):
        if spec.get(key) != learners:
            bundle.fail(jwhere, f"{key} is {spec.get(key)}, but the topology has {learners} [[learners]]")
    if spec.get("completionMode") != "Indexed":
        bundle.fail(jwhere, "completionMode is not Indexed: learner ids come from the completion index")
    if get(spec, "template", "spec", "restartPolicy") != "Never":
        bundle.fail(jwhere, "restartPolicy is not Never: podFailurePolicy needs it")
    if spec.get("backoffLimitPerIndex") is None:
        bundle.fail(jwhere, "no backoffLimitPerIndex: one learner's failures would count against the others")
    if (spec.get("maxFailedIndexes") or 0) > learners:
        bundle.fail(jwhere, "maxFailedIndexes exceeds completions")
    cname = get(spec, "template", "spec", "containers", 0, "name")
    actions = {}
    for rule in get(spec, "podFailurePolicy", "rules", default=[]):
        codes = rule.get("onExitCodes")
        if codes:
            if codes.get("containerName") not in (None, cname):
                bundle.fail(jwhere, f"podFailurePolicy names container {codes.get('containerName')}, not {cname}")
            if codes.get("operator") == "In":
                for code in codes.get("values") or []:
                    actions.setdefault(f"exit {code}", rule.get("action"))
        for cond in rule.get("onPodConditions") or []:
            actions.setdefault(cond.get("type"), rule.get("action"))
    # 75 (no syncer) counts: Ignore would replace a learner started after the run's end forever. An island's pod
    # exits as torchrun does (1 once its restarts are spent), whatever its ranks exited with.
    want = {"exit 77": "FailIndex", "exit 2": "FailJob", "exit 75": None, "DisruptionTarget": "Ignore"}
    if island:
        want = {"exit 77": None, "exit 2": None, "exit 75": None, "DisruptionTarget": "Ignore"}
        check_island(bundle, jwhere, job, lenv)
    for what, action in want.items():
        if actions.get(what) != action:
            bundle.fail(jwhere, f"podFailurePolicy: {what} should be {action}, is {actions.get(what)}")
    senv = env_of(sts)
    if senv.get("ATOLL_ON_SIGNAL") != "pause":
        bundle.fail(swhere, f"ATOLL_ON_SIGNAL is {senv.get('ATOLL_ON_SIGNAL', 'unset')}: SIGTERM on the syncer's pod "
                            "(a drain) would end the run for every learner")
    # A drained node's learner leaves in order; exiting 75, it is replaced (the rule above), not counted done.
    if not island and lenv.get("ATOLL_LEAVE_STATUS") != "75":
        bundle.fail(jwhere, f"ATOLL_LEAVE_STATUS is {lenv.get('ATOLL_LEAVE_STATUS', 'unset')}: a drained learner exits "
                            "0 and the Job counts its id done instead of starting it again")
    if topo_path and not topo_path.endswith("/topology.toml"):
        bundle.fail(swhere, f"ATOLL_TOPOLOGY {topo_path} is not the ConfigMap's topology.toml")
    return topo_map["data"]["topology.toml"]


def check_island(bundle, where, job, env):
    """An island's pod: as many ranks as GPUs, a script to run, and shared memory for its ranks."""
    pod = get(job, "spec", "template", "spec", default={})
    container = get(pod, "containers", 0, default={})
    size = env.get("ATOLL_ISLAND_SIZE")
    gpus = get(container, "resources", "limits", "nvidia.com/gpu")
    if not (size or "").isdigit() or int(size) < 1:
        bundle.fail(where, f"ATOLL_ISLAND_SIZE is {size!r}: expected a count of ranks")
    elif gpus is not None and int(gpus) != int(size):
        bundle.fail(where, f"ATOLL_ISLAND_SIZE is {size} but the pod has {gpus} GPUs: one rank a GPU")
    if not env.get("ATOLL_ISLAND_SCRIPT"):
        bundle.fail(where, "ATOLL_ISLAND_SIZE without ATOLL_ISLAND_SCRIPT: the ranks would have nothing to run")
    if "ATOLL_LEAVE_STATUS" in env:
        bundle.fail(where, "ATOLL_LEAVE_STATUS on an island: its ranks end with torchrun, they do not leave in order")
    shm = [m for m in container.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"]
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    if not shm or get(volumes.get(shm[0].get("name"), {}), "emptyDir", "medium") != "Memory":
        bundle.fail(where, "no memory-backed /dev/shm: a container's 64 MiB is too little for the ranks of an island")


def check_repo(bundle, pods, repo):
    used = {e.get("name") for _, _, t in pods.values() for c in get(t, "spec", "containers", default=[])
            for e in c.get("env") or []}
    used = {n for n in used if n and n.startswith("ATOLL_")}
    node = os.path.join(repo, "examples/deploy/atoll-node")
    if not os.path.isfile(node):
        bundle.fail("examples/deploy/atoll-node", "missing: it is the image's entrypoint")
    else:
        with open(node, encoding="utf-8") as fh:
            script = fh.read()
        for n in sorted(used):
            if not re.search(rf"\b{n}\b", script):
                bundle.fail("examples/deploy/atoll-node", f"does not read {n}, which the manifests set")
    containerfile = os.path.join(bundle.folder, "Containerfile")
    with open(containerfile, encoding="utf-8") as fh:
        cf = fh.read()
    copied = set()
    for line in cf.splitlines():
        m = re.match(r"^COPY\s+(?!--from)(.+)$", line.strip())
        if m:
            copied.update(w.rstrip("/") for w in m.group(1).split()[:-1])
    with open(os.path.join(repo, "CMakeLists.txt"), encoding="utf-8") as fh:
        cmake = fh.read()
    depth, always = 0, set()
    for line in cmake.splitlines():
        s = line.split("#", 1)[0].strip()
        if re.match(r"^if\s*\(", s):
            depth += 1
        elif re.match(r"^endif\s*\(", s):
            depth -= 1
        m = re.match(r"^add_subdirectory\s*\(\s*([\w./-]+)", s)
        if m and depth == 0:
            always.add(m.group(1).split("/")[0])
    for d in sorted(always | {"CMakeLists.txt", "cmake", "scripts", "python"}):
        if d not in copied:
            bundle.fail("Containerfile", f"does not copy {d}, which the build needs")
    if not re.search(r'^ENTRYPOINT\s*\["atoll-node"\]', cf, re.M):
        bundle.fail("Containerfile", 'its ENTRYPOINT is not ["atoll-node"]')
    # The image holds the wheel's atoll and atoll-node (examples/deploy/atoll-node), on PATH.
    if not re.search(r"scripts/wheel\b", cf) or not re.search(r"^ENV PATH=/opt/atoll/atoll/_bin:", cf, re.M):
        bundle.fail("Containerfile", "does not build the wheel (scripts/wheel) and put its atoll/_bin on PATH")


def check_topology(bundle, text):
    atoll = os.environ.get("ATOLL")
    if not atoll:
        return "topology: not run through `atoll validate` ($ATOLL unset)"
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as fh:
        fh.write(text)
        fh.flush()
        r = subprocess.run([atoll, "validate", fh.name], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        bundle.fail("topology.yaml", f"atoll validate refuses topology.toml: {(r.stdout + r.stderr).strip()}")
    return "topology: " + r.stdout.strip().split(": ", 1)[-1]


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    types = Types(argv[1])
    failed = False
    present = os.listdir(argv[2])
    for swap in [None] + [f for f in ALTERNATIVES if f in present]:
        bundle = Bundle(argv[2], swap)
        check_schema(bundle, types)
        notes = []
        try:
            pods = check_pods(bundle)
            check_services(bundle, pods)
            topology = check_atoll(bundle)
            if len(argv) == 4:
                check_repo(bundle, pods, argv[3])
            if topology and swap is None:
                notes.append(check_topology(bundle, topology))
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as e:
            bundle.fail("bundle", f"too broken to check its references (above): {e!r}")
        for f in bundle.failures:
            print(f)
        kinds = ", ".join(f"{o.get('kind')} {get(o, 'metadata', 'name')}" for _, o in bundle.objects)
        with_swap = f" with {swap} for {ALTERNATIVES[swap]}" if swap else ""
        print(f"{len(bundle.objects)} objects{with_swap} ({kinds}) against {len(types.kinds)} kinds of Kubernetes "
              f"1.30; {len(bundle.failures)} failures")
        for n in notes:
            print(n)
        failed = failed or bool(bundle.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
