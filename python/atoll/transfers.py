"""Transfers: a learner's values between its tensors (on any device) and atoll, without draining a GPU's queue.

A GPU runs the user's step asynchronously: the Python loop is usually a step
ahead of the device. Anything at a step boundary that waits for the device (a
synchronize, a copy from pageable host memory) empties that queue, and the GPU
idles until the loop has queued work again. So, for tensors on a GPU:

- **uploads** (the global versions a learner adopts) are staged in pinned host
  memory, go to each device in one asynchronous copy per boundary, and update
  the tensors there, in stream order: the next step sees them, and the host
  never waits;
- **reads** (the fragments due) are asynchronous copies into pinned host
  memory, closed by an event. :meth:`Transfers.collect` waits for that event
  at the next boundary, by which time the GPU has finished them, unless it is
  more than a step behind. The values are then lent to atoll, whose actor
  copies them on its own thread, not the training thread's.

Pinned buffers come from two rings of two slots each, grown to the largest
size asked for and then reused, so a slot written at one boundary is free
again two boundaries later (a read's slot once atoll released what was lent
from it). Tensors on the CPU take the same paths, with plain memory.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .tensors import view


def buffer_of(t: Any, n: int) -> memoryview:
    """The first ``n`` values of a contiguous float32 CPU tensor, as a buffer atoll takes, without a copy.

    The tensor must outlive every use of the buffer.
    """
    if n == 0:
        return memoryview(b"").cast("f")
    return memoryview((ctypes.c_float * n).from_address(t.data_ptr()))


def _range(p: Any, start: int, n: int) -> Any:
    """Values [start, start + n) of the contiguous tensor ``p``, as a 1-D view that writes through to it."""
    return p.view(-1)[start:start + n]


@dataclass
class _Slot:
    tensor: Any = None  # 1-D float32 host tensor (pinned when a GPU is in use)
    events: List[Any] = field(default_factory=list)  # the device copies that use it, pending
    lent: int = 0  # the number of the step its values were lent with, until atoll released them


@dataclass
class PendingRead:
    """Fragments being copied to host memory; :meth:`Transfers.collect` gives their values."""
    fragments: List[int]
    size: int
    sequence: Optional[int]  # the request that asked for them
    slot: _Slot


class Transfers:
    """Moves fragments' values between a learner's tensors and host memory (see the module's docs).

    ``tensor(i)`` returns parameter i, checked (contiguous); ``pieces[f]``
    lists fragment f's pieces as (tensor index, offset in the fragment, count,
    offset in the tensor): a piece is a whole tensor (offset 0, count its
    numel) or, in a syncer in shards, a block of a large tensor's rows, so a
    piece is always the range [offset, offset + count) of its tensor's values
    in storage order; ``sizes[f]`` is fragment f's count of values.
    """

    # How long a slot waits for atoll to release what was lent from it before a new slot replaces it.
    RELEASE_SECONDS = 30.0

    def __init__(self, tensor: Any, pieces: Sequence[Sequence[Tuple[int, int, int, int]]], sizes: Sequence[int],
                 cuda: bool, released: Callable[[int, float], bool]) -> None:
        self._tensor = tensor
        self._released = released
        self._retired: List[Any] = []  # slots' tensors atoll may still read (kept alive, never reused)
        self._pieces = pieces
        self._sizes = sizes
        self._cuda = cuda
        self._uploads = [_Slot(), _Slot()]
        self._reads = [_Slot(), _Slot()]
        self._turn = {"uploads": 0, "reads": 0}
        self.waited = 0.0  # seconds the host spent waiting for the device
        self.allocations = 0  # host buffers allocated (pinned ones, with a GPU)

    # -- uploads

    def apply(self, updates: Sequence[Any]) -> None:
        """Applies updates (values <- scale * values + offset, per fragment) to the tensors, in order."""
        import torch

        total = sum(self._sizes[u.fragment] for u in updates)
        staged = None
        if self._cuda:  # every update's offset in one pinned buffer, then one copy per device
            slot = self._slot("uploads", total)
            at = 0
            for u in updates:
                n = self._sizes[u.fragment]
                slot.tensor[at:at + n].copy_(view(u.offset))
                at += n
            staged = slot.tensor[:total]
            on_device: dict = {}
        with torch.no_grad():
            base = 0
            for u in updates:
                source = view(u.offset) if staged is None else None
                for index, at, n, start in self._pieces[u.fragment]:
                    p = _range(self._tensor(index), start, n)
                    if staged is None:
                        b = source[at:at + n]
                    elif p.is_cuda:
                        d = on_device.get(p.device)
                        if d is None:
                            d = on_device[p.device] = staged.to(p.device, non_blocking=True)
                            slot.events.append(self._event(p.device))
                        b = d[base + at:base + at + n]
                    else:  # a CPU tensor beside GPU ones
                        b = staged[base + at:base + at + n]
                    if u.scale == 0.0:
                        p.copy_(b)
                    elif u.scale == 1.0:
                        p.add_(b)
                    else:
                        p.mul_(u.scale).add_(b)
                base += self._sizes[u.fragment]

    # -- reads

    def start_read(self, fragments: Sequence[int], sequence: Optional[int]) -> PendingRead:
        """Starts copying ``fragments`` (back to back, in order) to host memory; nothing waits."""
        import torch

        total = sum(self._sizes[f] for f in fragments)
        slot = self._slot("reads", total)
        target = slot.tensor
        devices = set()
        base = 0
        with torch.no_grad():
            for f in fragments:
                for index, at, n, start in self._pieces[f]:
                    p = _range(self._tensor(index), start, n)
                    target[base + at:base + at + n].copy_(p.detach(), non_blocking=p.is_cuda)
                    if p.is_cuda:
                        devices.add(p.device)
                base += self._sizes[f]
        slot.events.extend(self._event(d) for d in devices)
        return PendingRead(list(fragments), total, sequence, slot)

    def collect(self, read: PendingRead) -> memoryview:
        """Waits until ``read``'s copies are done; its values, valid until the slot's next use two reads on."""
        self._wait(read.slot)
        return buffer_of(read.slot.tensor, read.size)

    def lent(self, read: PendingRead, number: int) -> None:
        """``read``'s values went to atoll lent, with step ``number``: its slot waits for their release."""
        read.slot.lent = number

    def read(self, fragments: Sequence[int]) -> PendingRead:
        """The fragments' values now (waits for the device): collect() gives them at once."""
        pending = self.start_read(fragments, None)
        self._wait(pending.slot)
        return pending

    # -- pinned slots

    def _slot(self, ring: str, size: int) -> _Slot:
        import torch

        turn = self._turn[ring]
        self._turn[ring] = 1 - turn
        slot = getattr(self, "_" + ring)[turn]
        self._wait(slot)  # its copies, two boundaries ago, are long done
        if slot.lent:
            started = time.perf_counter()
            if not self._released(slot.lent, self.RELEASE_SECONDS):  # atoll may read it yet: a new one
                self._retired.append(slot.tensor)
                slot.tensor = None
            slot.lent = 0
            self.waited += time.perf_counter() - started
        if slot.tensor is None or slot.tensor.numel() < size:
            # Pinning memory is slow (the pages are locked): a slot starts at the largest fragment and
            # doubles, so that it is allocated a few times in a run, not whenever a larger read comes.
            old = slot.tensor.numel() if slot.tensor is not None else 0
            capacity = max(size, 2 * old, max(self._sizes, default=1))
            slot.tensor = torch.empty(capacity, dtype=torch.float32, pin_memory=self._cuda)
            self.allocations += 1
        return slot

    def _wait(self, slot: _Slot) -> None:
        if slot.events:
            started = time.perf_counter()
            for e in slot.events:
                e.synchronize()
            slot.events.clear()
            self.waited += time.perf_counter() - started

    @staticmethod
    def _event(device: Any) -> Any:
        import torch

        with torch.cuda.device(device):
            e = torch.cuda.Event()
            e.record()
        return e
