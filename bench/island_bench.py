#!/usr/bin/python3
"""Islands against one-process learners, at equal tokens: held-out quality and what step() costs.

Three ways to train the GPT of examples/torch/gpt.py on the State of the Union speeches with
examples/python/train_gpt.py, each over the same tokens, seed by seed:

  islands  2 learners, each an island of 2 ranks in DDP (torchrun, gloo), batch B per rank (2B an island)
  two      2 learners of one process each, batch 2B: the islands' global batch and learner count
  four     4 learners of one process each, batch B: the islands' ranks as learners of their own

The islands should match `two` within its spread (the same algorithm, DDP inside) and beat `four`
(DiLoCo's quality falls as its learners grow, per token). Each run prints the final model's held-out
bits per byte (train_gpt.py's own evaluation); each learner (each rank of an island) prints the mean
wall time its step() took, the leader's and the other ranks' apart.

    bench/island_bench.py [--seeds 3] [--tokens 1200000] [--out atoll-out/bench/island_bench.json]

--memory W measures instead what leading an island costs in memory: one island of 2 ranks training an MLP
8-W-W-3 split by hand between them (tests/python/island_rank.py, the stand-in for FSDP) for --steps steps
against a syncer, each rank's peak RSS (VmHWM) against the model's size. The ranks' own training is the
same (each holds half of each tensor, and the stand-in gathers the whole model for its forward pass); what
the leader holds more is atoll's: its learner's host copy of the global model and each fragment's base,
and the fragments in flight.

Run it alone on an idle machine: a run's processes share its cores. It prints mean +- sd over the seeds
and writes every run as JSON.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "python" / "train_gpt.py"
CONFIGS = {  # name: (learners, ranks a learner, batch a rank, in multiples of --batch)
    "islands": (2, 2, 1),
    "two": (2, 1, 2),
    "four": (4, 1, 1),
}


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N (default 3)")
    ap.add_argument("--tokens", type=int, default=1_200_000, help="bytes each run trains, all learners (default 1.2M)")
    ap.add_argument("--batch", type=int, default=4, help="B: windows a step of an island's rank (default 4)")
    ap.add_argument("--layers", type=int, default=4, help="the GPT's (default 4, as train_gpt.py's)")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"which, comma-separated (default {','.join(CONFIGS)})")
    ap.add_argument("--workdir", default="atoll-out/bench/island", help="the runs' files")
    ap.add_argument("--out", default="atoll-out/bench/island_bench.json")
    ap.add_argument("--memory", type=int, default=0, metavar="W", help="measure memory with an MLP 8-W-W-3 instead")
    ap.add_argument("--steps", type=int, default=40, help="--memory: steps the island takes (default 40)")
    return ap.parse_args()


def run(a: argparse.Namespace, config: str, seed: int) -> dict:
    learners, ranks, batch = CONFIGS[config]
    work = Path(a.workdir) / f"{config}-seed{seed}"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(TRAIN), "--learners", str(learners), "--island", str(ranks), "--batch",
         str(batch * a.batch), "--tokens", str(a.tokens), "--seed", str(seed), "--layers", str(a.layers), "--width",
         str(a.width), "--heads", str(a.heads), "--context", str(a.context), "--eval-every", "0", "--workdir",
         str(work)], capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{config} seed {seed}: train_gpt.py exited {done.returncode}:\n{done.stdout[-3000:]}"
                         f"{done.stderr[-3000:]}")
    bpb = float(re.search(r"held-out bits per byte ([0-9.]+)", done.stdout).group(1))
    costs = {"leader": [], "other": []}
    for log in work.glob("learner-*.log"):
        for rank, ms in re.findall(r"learner \d+(?: rank (\d+))?: step\(\) took ([0-9.]+) ms", log.read_text()):
            costs["other" if rank not in ("", "0") else "leader"].append(float(ms))
    report = json.loads((work / "report.json").read_text())
    return {"config": config, "seed": seed, "bits_per_byte": bpb, "wall_seconds": wall, "tokens": report["tokens"],
            "step_ms_leader": costs["leader"], "step_ms_other": costs["other"], "rounds": report["rounds"],
            "others_cpu": report.get("hardware", {}).get("others_cpu")}


def spread(values: list) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} +- {statistics.stdev(values):.4f}"


def memory(a: argparse.Namespace) -> int:
    import os
    import signal

    sys.path.insert(0, str(REPO / "tests" / "python"))
    sys.path.insert(0, str(REPO / "examples" / "python"))
    import local_job  # noqa: F401  (finds torch and atoll)
    from island_rank import make_model

    import atoll

    work = Path(a.workdir) / f"memory-{a.memory}"
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("island-*"):
        old.unlink()
    model = make_model(a.memory)
    parameters = sum(p.numel() for p in model.parameters())
    atoll.save_model(model, work / "model.atoll", f"mlp 8-{a.memory}-{a.memory}-3")
    del model
    (work / "topology.toml").write_text(
        f'mode = "decoupled"\n[model]\nkind = "external"\npath = "{work / "model.atoll"}"\n[outer]\n'
        'fragments = 4\nsync_every = 4\n[checkpoint]\ndir = ""\n[[learners]]\n')
    token = work / "token"
    token.write_text(atoll.make_token())
    token.chmod(0o600)
    port_file = work / "port"
    port_file.unlink(missing_ok=True)
    syncer = subprocess.Popen([local_job.atoll_command(), "syncer", str(work / "topology.toml"), "--listen",
                               "127.0.0.1:0", "--port-file", str(port_file), "--token-file", str(token), "--report",
                               str(work / "report.json"), "-q"],
                              stdout=open(work / "syncer.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if syncer.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"atoll syncer did not start: {(work / 'syncer.log').read_text()[-2000:]}")
            time.sleep(0.05)
        island = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
             "--redirects", "2", "--tee", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
             f"127.0.0.1:{local_job.free_port()}", "--rdzv_id", "island-memory",
             str(REPO / "tests" / "python" / "island_rank.py"), "--syncer",
             "127.0.0.1:" + port_file.read_text().strip(), "--token-file", str(token), "--id", "0", "--mode",
             "sharded", "--wide", str(a.memory), "--max-steps", str(a.steps), "--out", str(work), "--timeout", "120"],
            capture_output=True, text=True,
            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(atoll.__file__).resolve().parents[1])))
        if island.returncode != 0:
            raise SystemExit(f"the island failed:\n{island.stdout[-3000:]}{island.stderr[-3000:]}")
    finally:
        syncer.send_signal(signal.SIGINT)
        syncer.wait(timeout=60)
    rss = {}  # what each rank said when it closed, MB: peak, after the welcome, at the end
    for rank, who in ((0, "leader"), (1, "other")):
        last = json.loads((work / f"island-0-rank-{rank}.jsonl").read_text().splitlines()[-1])
        rss[who] = {k: last[f"{k}_kib"] / 1024 for k in ("peak_rss", "welcomed_rss", "rss")}
    model_mb = parameters * 4 / 2 ** 20
    print(f"MLP 8-{a.memory}-{a.memory}-3: {parameters} parameters, {model_mb:.1f} MB in float32; one island of 2 "
          f"ranks, each holding half of every tensor, {a.steps} steps")
    for what, key in (("peak", "peak_rss"), ("after the welcome", "welcomed_rss"), ("at the end", "rss")):
        more = rss["leader"][key] - rss["other"][key]
        print(f"RSS {what}: leader {rss['leader'][key]:.0f} MB, the other rank {rss['other'][key]:.0f} MB: the "
              f"leader {more:.0f} MB more, {more / model_mb:.2f} times the model")
    peaks = [rss["leader"]["peak_rss"], rss["other"]["peak_rss"]]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"arguments": vars(a), "parameters": parameters, "model_mb": model_mb,
                               "rss_mb": rss, "peak_rss_mb": {"leader": peaks[0], "other": peaks[1]}}, indent=1))
    print(f"written to {out}")
    return 0


def main() -> int:
    a = arguments()
    if a.memory:
        return memory(a)
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit(f"--configs: unknown {c!r} (expected some of {', '.join(CONFIGS)})")
    runs = []
    for seed in range(1, a.seeds + 1):  # seed by seed, the configurations alternated
        for c in configs:
            r = run(a, c, seed)
            runs.append(r)
            print(f"{c:8} seed {seed}: {r['bits_per_byte']:.4f} bits per byte, {r['wall_seconds']:.0f} s, "
                  f"step() {statistics.mean(r['step_ms_leader']):.2f} ms (leader or learner)"
                  + (f", {statistics.mean(r['step_ms_other']):.2f} ms (other ranks)" if r["step_ms_other"] else ""),
                  flush=True)
    print(f"\nGPT {a.layers}x{a.width}, context {a.context}, {a.tokens} bytes a run, seeds 1-{a.seeds}; "
          f"B = {a.batch} windows")
    print(f"{'':8}  {'learners':>8}  {'ranks':>5}  {'batch':>5}  {'bits per byte':>17}  {'step() ms, leader':>17}  "
          f"{'other ranks':>15}")
    summary = {}
    for c in configs:
        mine = [r for r in runs if r["config"] == c]
        learners, ranks, batch = CONFIGS[c]
        bpb = [r["bits_per_byte"] for r in mine]
        lead = [statistics.mean(r["step_ms_leader"]) for r in mine]
        other = [statistics.mean(r["step_ms_other"]) for r in mine if r["step_ms_other"]]
        summary[c] = {"bits_per_byte": bpb, "step_ms_leader": lead, "step_ms_other": other}
        print(f"{c:8}  {learners:>8}  {ranks:>5}  {batch * a.batch:>5}  {spread(bpb):>17}  {spread(lead):>17}  "
              f"{spread(other):>15}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"arguments": vars(a), "runs": runs, "summary": summary}, indent=1))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
