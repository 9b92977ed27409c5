"""The State of the Union addresses as a user's own data: byte windows for training, held-out windows to evaluate.

The speeches are data/sotu/*.txt (scripts/setup fetches them), in name order.
Every tenth is held out, and learner i of n trains on speeches i, i + n, ... of
the rest, so no two learners train the same bytes. A training batch is B
random windows of T + 1 bytes of the learner's speeches: inputs are the first
T bytes, targets the T bytes after each.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterator, List, Tuple

import torch

REPO = Path(__file__).resolve().parents[2]


def speeches(folder: str = "") -> List[bytes]:
    """Every speech, in name order (from `folder`, else $ATOLL_DATA_DIR, else the clone's data/)."""
    root = Path(folder or os.environ.get("ATOLL_DATA_DIR") or REPO / "data") / "sotu"
    files = sorted(root.glob("*.txt"))
    if not files:
        raise SystemExit(f"no speeches in {root}: run scripts/setup (it fetches them), or set ATOLL_DATA_DIR")
    return [f.read_bytes() for f in files]


def split(docs: List[bytes], learner: int, learners: int, holdout_every: int = 10) -> Tuple[bytes, bytes]:
    """(this learner's training bytes, the held-out bytes)."""
    held = [d for i, d in enumerate(docs) if i % holdout_every == holdout_every - 1]
    train = [d for i, d in enumerate(docs) if i % holdout_every != holdout_every - 1]
    return b"\n".join(train[learner::learners]), b"\n".join(held)


def batches(data: bytes, batch: int, context: int, seed: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """Random windows of `data`, forever: (inputs, targets), int64 [batch, context] each."""
    array = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(array) - context - 1, (batch,), generator=g)
        windows = torch.stack([array[s:s + context + 1] for s in starts.tolist()])
        yield windows[:, :-1], windows[:, 1:]


def held_out(data: bytes, context: int, windows: int) -> torch.Tensor:
    """`windows` windows of context + 1 bytes spread evenly over the held-out bytes, int64."""
    array = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    step = max(1, (len(array) - context - 1) // windows)
    return torch.stack([array[i * step:i * step + context + 1] for i in range(windows)])


@torch.no_grad()
def bits_per_byte(model: torch.nn.Module, windows: torch.Tensor, device: str, batch: int = 32) -> dict:
    """Held-out loss (nats per byte), bits per byte and next-byte accuracy of a GPT-like model."""
    was_training = model.training
    model.eval()
    loss_sum, right, count = 0.0, 0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(device)
        x, y = w[:, :-1], w[:, 1:]
        logits = model.logits(x)
        loss_sum += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                                                            reduction="sum"))
        right += int((logits.argmax(-1) == y).sum())
        count += y.numel()
    model.train(was_training)
    loss = loss_sum / count
    return {"loss": loss, "bits_per_byte": loss / math.log(2), "accuracy": right / count, "count": count}
