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

Pinned buffers come from two rings of two slots each, reserved when the
learner is made, each the size of every fragment together (a welcome uploads
them all, the run's end reads them all), and reused: pinning memory locks its
pages and takes about a second a gigabyte, too long for a step boundary. A slot
written at one boundary is free again two boundaries later (a read's slot once
atoll released what was lent from it). Tensors on the CPU take the same
paths, with plain memory.

The optimizer's moments (:class:`MomentsCopy`) go the same way: copied on the
device into a reserved buffer in stream order (fast, and the next step may
change the originals), then to pinned memory on a side stream, and handed at a
later boundary, lent.
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
                 cuda: bool, released: Callable[[int, float], bool], rings: Sequence[str] = ("uploads", "reads")) -> None:
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
        # The rings this side uses, reserved now; uploads are staged only for a GPU.
        for ring in rings:
            if ring == "reads" or cuda:
                for slot in getattr(self, "_" + ring):
                    self._reserve(slot, sum(sizes))

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
            self._reserve(slot, size)  # a slot given up above, or a ring not reserved: once
        return slot

    def _reserve(self, slot: _Slot, size: int) -> None:
        import torch

        # Never less than every fragment together: no read or upload is larger, so a slot never grows.
        slot.tensor = torch.empty(max(size, sum(self._sizes), 1), dtype=torch.float32, pin_memory=self._cuda)
        self.allocations += 1

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


class MomentsCopy:
    """An Adam-style optimizer's moments copied to host memory without draining a GPU's queue.

    :meth:`start`, at a boundary, copies each tensor's moments into a buffer
    on its device reserved for it (in stream order: after the step that made
    them, before the next one changes them; a device copy takes well under a
    millisecond), then, on a side stream, to pinned host memory, closed by an
    event. :meth:`collect`, at a later boundary, waits for that event (done by
    then unless the device is more than a step behind) and gives m then v back
    to back, to be lent to atoll until it released them. On the CPU the first
    copy is the host copy. Every buffer is reserved when this is made.

    ``total``: the model's values; ``devices``: {device: values the optimizer
    holds there} for tensors on a GPU.
    """

    RELEASE_SECONDS = Transfers.RELEASE_SECONDS

    def __init__(self, total: int, devices: dict, released: Callable[[int, float], bool]) -> None:
        import torch

        self._total = total
        self._released = released
        self._cuda = bool(devices)
        self.allocations = 0
        self.waited = 0.0
        self._retired: List[Any] = []  # host buffers atoll may still read (kept alive, never reused)
        self._host = self._new_host()
        # Per device: m then v of each tensor there, and a side stream for the copy out.
        self._staging = {d: (torch.empty(2 * n, dtype=torch.float32, device=d), torch.cuda.Stream(d))
                         for d, n in devices.items()}
        self.allocations += len(self._staging)
        # A step count kept on a device (fused or capturable optimizers) comes back through this.
        self._step_host = torch.zeros(1, dtype=torch.float64, pin_memory=True) if self._cuda else None
        self._events: List[Any] = []
        self._step: Any = 0  # the step count as start() was given it, or the pinned copy of it
        self._lent = 0  # the number of the step the host buffer was lent with, until atoll released it
        self.pending = False  # copies started and not yet collected

    def _new_host(self) -> Any:
        import torch

        self.allocations += 1
        # Zeros: parameters the optimizer does not hold have no moments.
        return torch.zeros(2 * self._total, dtype=torch.float32, pin_memory=self._cuda)

    def start(self, pieces: Sequence[Tuple[int, int, Any, Any]], step: Any) -> None:
        """Starts copying (offset in the model, count, m's values, v's values) per tensor: 1-D views, each on
        one device; ``step`` is the optimizer's step count (an int, or a one-value tensor)."""
        import torch

        self._reclaim()
        self._events.clear()
        host, total = self._host, self._total
        on_device: dict = {}  # device: [(offset in the model, offset in its staging, count)]
        with torch.no_grad():
            for at, n, m, v in pieces:
                if not m.is_cuda:
                    host[at:at + n].copy_(m)
                    host[total + at:total + at + n].copy_(v)
                    continue
                staging, side = self._staging[m.device]
                used = on_device.setdefault(m.device, [])
                if not used:  # the last copy out of this staging must be done before it is written again
                    torch.cuda.current_stream(m.device).wait_stream(side)
                base = 2 * sum(c for _, _, c in used)
                staging[base:base + n].copy_(m)  # on the training stream: after the step that made them
                staging[base + n:base + 2 * n].copy_(v)
                used.append((at, base, n))
            self._step = step
            for device, used in on_device.items():
                staging, side = self._staging[device]
                with torch.cuda.device(device):
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for at, base, n in used:
                            host[at:at + n].copy_(staging[base:base + n], non_blocking=True)
                            host[total + at:total + at + n].copy_(staging[base + n:base + 2 * n], non_blocking=True)
                        if torch.is_tensor(step) and step.is_cuda and step.device == device:
                            self._step_host.copy_(step.reshape(1), non_blocking=True)
                            self._step = self._step_host
                        e = torch.cuda.Event()
                        e.record(side)
                        self._events.append(e)
        self.pending = True

    def collect(self) -> Tuple[int, memoryview]:
        """Waits for the copies :meth:`start` began; (step, m then v) as a buffer lent until released."""
        started = time.perf_counter()
        for e in self._events:
            e.synchronize()
        self._events.clear()
        self.waited += time.perf_counter() - started
        self.pending = False
        step = self._step
        return int(step.item()) if hasattr(step, "item") else int(step), buffer_of(self._host, 2 * self._total)

    def lent(self, number: int) -> None:
        """What :meth:`collect` gave went to atoll with step ``number``: the buffer waits for its release."""
        self._lent = number

    def drop(self) -> None:
        """Forgets copies started for a pull that went away (their stream orders them before any next use)."""
        self._events.clear()
        self.pending = False

    def _reclaim(self) -> None:
        if self._lent:
            started = time.perf_counter()
            if not self._released(self._lent, self.RELEASE_SECONDS):  # atoll may read it yet: a new one
                self._retired.append(self._host)
                self._host = self._new_host()
            self._lent = 0
            self.waited += time.perf_counter() - started
