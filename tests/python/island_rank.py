"""One rank of an island in the island tests (test_island.py): a PyTorch loop over torch.distributed (gloo)
whose ranks train one replica as one atoll learner.

    torchrun --nnodes 1 --nproc_per_node 2 ... island_rank.py --syncer HOST:PORT --token-file F --id N \\
        --mode ddp|sharded --out DIR [--timeout S] [--tokens-per-rank T ...]

The syncer, token file and id default to what atoll-node exports (ATOLL_SYNCER, ATOLL_TOKEN_FILE,
ATOLL_LEARNER_ID), and TLS comes from ATOLL_TLS_DIR, so that the Slurm test runs it as an island's script.

ddp: the tiny MLP of conftest.tiny_model in DistributedDataParallel (every rank holds it whole).
sharded: the same MLP split by hand as FSDP would: each rank holds a block of rows of every weight and
bias (uneven where the rows do not divide), all-gathers them for its forward pass, averages the full
gradients and steps AdamW on its own block; the output bias stays replicated. atoll is told the split
with ``shards=``.

Each rank appends one JSON line per step to DIR/island-ID-rank-R.jsonl: its step, the tokens it passed,
a hash of what it holds (identical across ranks for replicated parameters), and on the leader the
versions it adopted. With --check-welcome, after the welcome the leader checks the island's values put
together against the global model (`welcome_matches`). At the end the leader writes the island's report
to DIR/island-ID-report.json.
Exit 0 once the run is over for the island.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import atoll

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_model  # noqa: E402  (the same MLP 8-16-3, the same initial weights)


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    # Defaults: what atoll-node exports to an island's ranks (ATOLL_ISLAND_SIZE), as on Slurm.
    env = os.environ.get
    ap.add_argument("--syncer", default=env("ATOLL_SYNCER"), required=not env("ATOLL_SYNCER"))
    ap.add_argument("--token-file", default=env("ATOLL_TOKEN_FILE"), required=not env("ATOLL_TOKEN_FILE"))
    ap.add_argument("--id", type=int, default=env("ATOLL_LEARNER_ID"), required=not env("ATOLL_LEARNER_ID"))
    ap.add_argument("--mode", choices=["ddp", "sharded"], default="ddp")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=10.0, help="the group's timeout, seconds")
    ap.add_argument("--tokens-per-rank", type=int, nargs="+", default=[16],
                    help="tokens each rank passes per step (rank r: the r-th, else the last)")
    ap.add_argument("--max-steps", type=int, default=200000)
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds each rank sleeps after a step: a slower learner, which leaves the cores to the "
                         "other processes while a test waits for a timeout or a restart")
    ap.add_argument("--wide", type=int, default=0,
                    help="an MLP 8-W-W-3 instead of the tiny one (a larger model, to measure memory; W = 0: tiny)")
    ap.add_argument("--check-welcome", action="store_true",
                    help="sharded: check the welcome put together against the global model (no other learner may "
                         "train yet, or a newer version could be adopted between the two reads)")
    return ap.parse_args()


def make_model(wide: int) -> torch.nn.Module:
    """The tiny MLP 8-16-3 (wide = 0), or an MLP 8-W-W-3; the same initial weights on every rank."""
    if not wide:
        return tiny_model(0)
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, wide), torch.nn.Tanh(), torch.nn.Linear(wide, wide),
                               torch.nn.Tanh(), torch.nn.Linear(wide, 3))


class HandSharded:
    """The MLP split by rows among the ranks, each rank holding one block of every tensor but the last bias,
    which stays replicated."""

    def __init__(self, module: torch.nn.Module, rank: int, size: int) -> None:
        self.module = module
        self.rank, self.size = rank, size
        self.params, self.shards, self.rows = [], {}, {}
        self.REPLICATED = {list(dict(module.named_parameters()))[-1]}
        for name, p in module.named_parameters():
            if name in self.REPLICATED:
                local = torch.nn.Parameter(p.detach().clone())
            else:
                per = math.ceil(p.shape[0] / size)
                lo, hi = min(rank * per, p.shape[0]), min((rank + 1) * per, p.shape[0])
                local = torch.nn.Parameter(p.detach()[lo:hi].clone().contiguous())
                self.shards[name] = (tuple(p.shape), lo)
                self.rows[name] = (per, p.shape)
            self.params.append((name, local))

    def full(self) -> dict:
        """Every tensor whole, gathered from the ranks (leaves that take gradients)."""
        out = {}
        for name, local in self.params:
            if name in self.REPLICATED:
                out[name] = local.detach().clone().requires_grad_(True)
                continue
            per, shape = self.rows[name]
            block = torch.zeros((per,) + tuple(shape[1:]))
            block[:local.shape[0]] = local.detach()
            blocks = [torch.zeros_like(block) for _ in range(self.size)]
            dist.all_gather(blocks, block)
            out[name] = torch.cat(blocks)[:shape[0]].contiguous().requires_grad_(True)
        return out

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from torch.nn.utils.stateless import functional_call

        self._full = self.full()
        return F.cross_entropy(functional_call(self.module, self._full, (x,)), y)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()
        for name, local in self.params:
            g = self._full[name].grad
            dist.all_reduce(g)
            g /= self.size
            if name in self.REPLICATED:
                local.grad = g
            else:
                lo = self.shards[name][1]
                local.grad = g[lo:lo + local.shape[0]].contiguous()


def memory(field: str) -> int:
    """This process's VmRSS or VmHWM (peak), KiB."""
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))


def digest(tensors) -> str:
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> int:
    a = arguments()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    out = Path(a.out)
    log = open(out / f"island-{a.id}-rank-{rank}.jsonl", "a")
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    tokens = a.tokens_per_rank[min(rank, len(a.tokens_per_rank) - 1)]

    if a.mode == "ddp":
        model = make_model(a.wide)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        params = list(model.named_parameters())
        shards = None

        def loss_of(x, y):
            return F.cross_entropy(ddp(x), y)

        def backward(loss):
            loss.backward()

        held = [p for _, p in params]
    else:
        sharded = HandSharded(make_model(a.wide), rank, size)
        params, shards = sharded.params, sharded.shards
        loss_of, backward = sharded.loss, sharded.backward
        held = [p for name, p in params if name in sharded.REPLICATED]

    opt = torch.optim.AdamW([p for _, p in params], lr=1e-2)
    tls = os.environ.get("ATOLL_TLS_DIR")  # atoll certs' files, as atoll-node names them
    tls_files = dict(tls_cert=f"{tls}/learner.pem", tls_key=f"{tls}/learner.key", tls_ca=f"{tls}/ca.pem") if tls else {}
    learner = atoll.Learner(params, a.syncer, id=a.id, token_file=a.token_file, optimizer=opt, group=dist.group.WORLD,
                            shards=shards, batch_size=16, wait_seconds=60, **tls_files)
    with learner:
        assert learner.wait_welcome(60), "not welcomed within 60 s"
        learner.step(tokens=0)  # the global model (and a peer's moments) in place before the first step
        welcomed_rss = memory("VmRSS")
        if a.mode == "sharded" and a.check_welcome:
            whole = sharded.full()  # the island's values put together, on every rank
            if rank == 0:
                global_values, _ = learner.global_parameters()
                matches = all(torch.equal(whole[n], global_values[n]) for n, _ in params)
                print(json.dumps({"welcome_matches": matches, "restart": restart}), file=log, flush=True)
        g = torch.Generator().manual_seed(1000 * a.id + 10 * rank + restart)
        w = torch.randn(8, 3, generator=torch.Generator().manual_seed(42))
        for step in range(a.max_steps):
            x = torch.randn(16, 8, generator=g)
            loss = loss_of(x, (x @ w).argmax(1))
            opt.zero_grad()
            backward(loss)
            opt.step()
            going = learner.step(tokens=tokens, loss=loss.item())
            line = {"step": step, "tokens": tokens, "hash": digest(held), "restart": restart, "going": going,
                    "pid": os.getpid()}
            if rank == 0:
                s = learner.state
                line.update(versions=min(s.versions), welcomed=s.welcomed)
            print(json.dumps(line), file=log, flush=True)
            if not going:
                break
            time.sleep(a.pause)
        report = learner.close()
    print(json.dumps({"closed": True, "restart": restart, "hash": digest(held), "timings": learner.timings,
                      "peak_rss_kib": memory("VmHWM"), "rss_kib": memory("VmRSS"),
                      "welcomed_rss_kib": welcomed_rss}), file=log, flush=True)
    if rank == 0:
        (out / f"island-{a.id}-report.json").write_text(json.dumps(report))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
