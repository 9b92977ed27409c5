"""Island: many ranks training one replica in lockstep (DDP or a sharded model inside), one learner to atoll.

An island is a ``torch.distributed`` process group whose ranks train one
replica together. The syncer sees it as one learner: its leader (rank 0 of the
group) holds the connections and the learner's state; every rank makes the
:class:`atoll.Learner` and calls ``step()`` at the same steps, and the island
moves values between its ranks over its own collectives:

- **writes** (global versions adopted, a peer's moments) go from the leader to
  every rank that holds a part of the values: all of them for a replicated
  parameter (DDP), its owner for a part of a sharded one;
- **reads** (the fragments due, the optimizer's moments) come from the leader
  alone for replicated parameters (every rank holds the same values) and from
  each part's owner for sharded ones, gathered on the leader: only the
  fragments due, only at their boundary.

Which values a rank holds is its :class:`Holding` per parameter: replicated,
or values ``[start, start + count)`` of the full tensor in storage order (a
block of rows: FSDP2's ``Shard(0)``, or a model split by hand). :func:`share`
turns the holdings and a list of vectors (fragments, each a list of pieces of
the full tensors) into one rank's :class:`RankPlan`: its own pieces, packed, in
its local tensors, and where each lands in the full vector. Plans are pure
functions of the holdings, so every rank computes every rank's plan alike.

Each boundary begins with one all-reduce of a :class:`Header`: every rank's
tokens and loss, and the leader's view of what the boundary moves; then
:meth:`Island.spread` and :meth:`Island.gather_into` move the values, one
collective each. They run on a gloo group over the island's ranks (CPU
tensors: the control never synchronizes a device), with the group's timeout:
a rank that dies or hangs fails the others within it (:class:`IslandFailed`),
and torchrun starts the island again.
"""
from __future__ import annotations

import collections
import datetime
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

# (tensor index, offset in the vector, count, offset in the tensor): values [offset in the tensor, + count) of one
# tensor, at [offset in the vector, + count) of a vector. A fragment is a list of them (atoll.Learner's pieces).
Piece = Tuple[int, int, int, int]

# The longest a group may let a rank wait for the others: a hung rank fails its island within it. torch's default
# (30 minutes) would hold a whole island that long.
MAX_TIMEOUT_SECONDS = 300.0


class IslandFailed(RuntimeError):
    """A collective between the island's ranks failed: a rank died or hung. The island is done; torchrun
    (``--max_restarts``) starts it again, and it comes back under the same learner id."""


@dataclass(frozen=True)
class Holding:
    """What one rank holds of one parameter: values [start, start + count) of the full tensor in storage
    order, or all of them like every other rank (replicated)."""
    start: int
    count: int
    replicated: bool


@dataclass
class RankPlan:
    """One rank's share of a list of vectors: its pieces in its local tensors, packed vector by vector
    (``pieces``, ``sizes``: what atoll.transfers.Transfers takes), and per vector where each packed run
    lands in the full vector, as (packed offset, full offset, count)."""
    pieces: List[List[Piece]]
    sizes: List[int]
    maps: List[List[Tuple[int, int, int]]]

    def whole(self, full_sizes: Sequence[int]) -> bool:
        """Whether the rank holds every value of every vector, in the full order (packed == full)."""
        return all(m == [(0, 0, n)] or (n == 0 and not m) for m, n in zip(self.maps, full_sizes))


def share(vectors: Sequence[Sequence[Piece]], holdings: Sequence[Holding], *, reading: bool, leader: bool) -> RankPlan:
    """The rank's plan over ``vectors`` given its ``holdings`` (per tensor). Reading: a replicated tensor is read
    on the leader alone; writing: every rank writes its own copy."""
    plan = RankPlan([], [], [])
    for vector in vectors:
        pieces: List[Piece] = []
        runs: List[Tuple[int, int, int]] = []
        packed = 0
        for tensor, at, n, start in vector:
            h = holdings[tensor]
            if h.replicated:
                if reading and not leader:
                    continue
                lo, hi, local_origin = start, start + n, 0
            else:
                lo, hi, local_origin = max(start, h.start), min(start + n, h.start + h.count), h.start
            if lo >= hi:
                continue
            count = hi - lo
            pieces.append((tensor, packed, count, lo - local_origin))
            full = at + (lo - start)
            if runs and runs[-1][0] + runs[-1][2] == packed and runs[-1][1] + runs[-1][2] == full:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + count)  # adjacent: one run
            else:
                runs.append((packed, full, count))
            packed += count
        plan.pieces.append(pieces)
        plan.sizes.append(packed)
        plan.maps.append(runs)
    return plan


def check_holdings(names: Sequence[str], numels: Sequence[int], by_rank: Sequence[Sequence[Holding]]) -> None:
    """Raises ValueError unless, for every tensor, the ranks either all replicate it or hold disjoint
    blocks that cover it exactly; the message names the tensor and the ranks."""
    for i, (name, n) in enumerate(zip(names, numels)):
        held = [(r, hs[i]) for r, hs in enumerate(by_rank)]
        replicated = [r for r, h in held if h.replicated]
        if replicated and len(replicated) != len(held):
            raise ValueError(f"island: parameter {name} is replicated on rank(s) {replicated} but sharded on the "
                             f"others: a parameter is either whole on every rank or split among them")
        if replicated:
            continue
        blocks = sorted((h.start, h.start + h.count, r) for r, h in held if h.count > 0)
        at = 0
        for lo, hi, r in blocks:
            if lo != at:
                what = (f"values [{at}, {lo}) are held by no rank" if lo > at else
                        f"rank {r}'s block [{lo}, {hi}) overlaps the block before it")
                raise ValueError(f"island: parameter {name} ({n} values) is not split exactly: {what}")
            at = hi
        if at != n:
            raise ValueError(f"island: parameter {name} ({n} values) is not split exactly: values [{at}, {n}) are "
                             "held by no rank")


def packed(plans: Sequence[RankPlan], vectors: Sequence[int]) -> List[int]:
    """Per rank, how many values it holds of the given vectors (indices into its plan), back to back."""
    return [sum(p.sizes[v] for v in vectors) for p in plans]


def unpack(fulls: Sequence[Any], plan: RankPlan, vectors: Sequence[int], source: Any) -> None:
    """Copies a rank's packed values of ``vectors`` (``source``, back to back) into their places in the full
    vectors ``fulls`` (one per vector, 1-D tensors)."""
    at = 0
    for full, v in zip(fulls, vectors):
        for p, f, n in plan.maps[v]:
            full[f:f + n].copy_(source[at + p:at + p + n])
        at += plan.sizes[v]


def pack(fulls: Sequence[Any], plan: RankPlan, vectors: Sequence[int], target: Any) -> None:
    """The reverse of :func:`unpack`: a rank's values of ``vectors`` out of ``fulls``, back to back into ``target``."""
    at = 0
    for full, v in zip(fulls, vectors):
        for p, f, n in plan.maps[v]:
            target[at + p:at + p + n].copy_(full[f:f + n])
        at += plan.sizes[v]


def group_timeout(group: Any) -> Optional[float]:
    """The seconds ``group``'s collectives wait for a rank (its init_process_group / new_group timeout), or None
    when this torch does not say."""
    import torch

    candidates = [lambda: group.options._timeout]  # torch 1.x
    for device in ("cpu", "cuda"):  # torch 2.x: a group's backends carry the options
        candidates.append(lambda d=device: group._get_backend(torch.device(d)).options._timeout)
    for read in candidates:
        try:
            t = read()
        except Exception:
            continue
        if isinstance(t, datetime.timedelta):
            return t.total_seconds()
    return None


class Island:
    """The collectives of one island (see the module's docs). ``group``: the island's process group."""

    def __init__(self, group: Any) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("Learner: group given, but torch.distributed is not initialized "
                             "(call torch.distributed.init_process_group first, as under torchrun)")
        self._dist = dist
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError("Learner: this process is not a rank of the group it was given")
        self.size = dist.get_world_size(group)
        self.leader = self.rank == 0
        self.timeout = group_timeout(group)
        if self.timeout is not None and self.timeout > MAX_TIMEOUT_SECONDS:
            raise ValueError(
                f"Learner: the island's process group lets a rank wait {self.timeout:.0f} s for the others (torch's "
                f"default is 1800): a hung rank would hold the whole island that long. Make it with a timeout of at "
                f"most {MAX_TIMEOUT_SECONDS:.0f} s, e.g. torch.distributed.init_process_group(\"gloo\", "
                f"timeout=datetime.timedelta(seconds=60))")
        ranks = self._ranks(group)
        self._leader_global = ranks[0]
        if dist.get_backend(group) == "gloo":
            self.group = group
        else:  # atoll's control runs on CPU tensors: a gloo group over the same ranks, as patient as the user's
            seconds = self.timeout if self.timeout is not None else 60.0
            self.group = dist.new_group(ranks=ranks, backend="gloo", timeout=datetime.timedelta(seconds=seconds))
        self.failed: Optional[str] = None  # why a collective failed; then no more collectives
        # The tensors of the last collectives, still referenced here: gloo's worker threads drop their own
        # references a moment after wait() returned, and must never be the ones to free a Python tensor (that
        # takes the GIL, and at the interpreter's exit aborts the process: seen with torch 1.13).
        self._kept: collections.deque = collections.deque(maxlen=16)

    def _ranks(self, group: Any) -> List[int]:
        dist = self._dist
        c10d = dist.distributed_c10d
        if group is None or group is dist.group.WORLD:
            return list(range(dist.get_world_size()))
        if hasattr(dist, "get_process_group_ranks"):  # torch 2.x
            return list(dist.get_process_group_ranks(group))
        return sorted(c10d._pg_group_ranks[group].keys())  # torch 1.x: {global rank: group rank}

    # -- collectives; a failure is the island's

    def _call(self, what: str, fn: Callable[[], Any], *tensors: Any) -> Any:
        if self.failed is not None:
            raise IslandFailed(self.failed)
        try:
            out = fn()
            self._kept.append(tensors)
            return out
        except RuntimeError as e:  # gloo's timeout, a peer's closed connection
            self.failed = (f"island rank {self.rank}: {what} with the other ranks failed ({e}); a rank died or hung, "
                           "so the island is done: torchrun (--max_restarts) starts it again")
            raise IslandFailed(self.failed) from e

    def all_gather_object(self, value: Any) -> List[Any]:
        out: List[Any] = [None] * self.size
        self._call("gathering each rank's description",
                   lambda: self._dist.all_gather_object(out, value, group=self.group))
        return out

    def broadcast_object(self, value: Any) -> Any:
        """The leader's ``value`` (picklable) on every rank."""
        import ctypes
        import pickle

        import torch

        data = pickle.dumps(value) if self.leader else b""
        size = self.broadcast(torch.tensor([len(data)], dtype=torch.int64))
        payload = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.leader and data else
                   torch.empty(int(size[0]), dtype=torch.uint8))
        if payload.numel():
            self.broadcast(payload)
        return value if self.leader else pickle.loads(ctypes.string_at(payload.data_ptr(), payload.numel()))

    def all_reduce(self, t: Any) -> Any:
        """Sums ``t`` (a CPU tensor) over the ranks, in place."""
        self._call("the step's exchange", lambda: self._dist.all_reduce(t, group=self.group), t)
        return t

    def broadcast(self, t: Any) -> Any:
        """The leader's ``t`` (a CPU tensor) into every rank's ``t``."""
        self._call("a broadcast from the leader",
                   lambda: self._dist.broadcast(t, src=self._leader_global, group=self.group), t)
        return t

    def gather(self, t: Any, out: Optional[List[Any]]) -> None:
        """Every rank's ``t`` (equal sizes) into the leader's ``out``, by rank."""
        self._call("gathering values on the leader", lambda: self._dist.gather(
            t, gather_list=out if self.leader else None, dst=self._leader_global, group=self.group), t, out)

    def scatter(self, t: Any, parts: Optional[List[Any]]) -> None:
        """The leader's ``parts[r]`` into rank r's ``t`` (equal sizes)."""
        self._call("sending values from the leader", lambda: self._dist.scatter(
            t, scatter_list=parts if self.leader else None, src=self._leader_global, group=self.group), t, parts)

    def spread(self, sources: Optional[list], vectors: List[int], plans: List[RankPlan], sizes: Sequence[int],
                whole: bool) -> list:
        """The leader's full ``sources`` (one per vector) to every rank, as each rank's packed part of each
        vector (``vectors`` index the ``plans``, whose full sizes are ``sizes``): whole vectors by one broadcast
        when every rank holds them whole (``whole``: DDP), else each rank's part by one scatter."""
        import torch

        if whole:  # one broadcast of them all, back to back
            buf = (torch.cat(sources) if len(sources) > 1 else sources[0]) if self.leader else \
                torch.empty(sum(sizes[v] for v in vectors), dtype=torch.float32)
            self.broadcast(buf)
            out, at = [], 0
            for v in vectors:
                out.append(buf[at:at + sizes[v]])
                at += sizes[v]
            return out
        counts = packed(plans, vectors)
        longest = max(counts)
        parts = None
        if self.leader:
            parts = [torch.zeros(longest, dtype=torch.float32) for _ in plans]
            for plan, part in zip(plans, parts):
                pack(sources, plan, vectors, part)
        mine = torch.empty(longest, dtype=torch.float32)
        self.scatter(mine, parts)
        plan, out, at = plans[self.rank], [], 0
        for v in vectors:
            out.append(mine[at:at + plan.sizes[v]])
            at += plan.sizes[v]
        return out

    def gather_into(self, mine: Any, vectors: Sequence[int], plans: Sequence[RankPlan], fulls: Sequence[Any]) -> None:
        """Every rank's packed part of ``vectors`` (``mine``, as its plan packs them) into their places in the
        leader's full vectors ``fulls`` (one per vector; the others pass anything), by one gather."""
        import torch

        longest = max(packed(plans, vectors))
        send = torch.zeros(longest, dtype=torch.float32)
        send[:mine.numel()].copy_(mine)
        out = [torch.empty(longest, dtype=torch.float32) for _ in plans] if self.leader else None
        self.gather(send, out)
        if self.leader:
            for plan, part in zip(plans, out):
                unpack(fulls, plan, vectors, part)

    def while_leader(self, work: Callable[[], Any]) -> Any:
        """Runs ``work`` on the leader (joining, waiting for the syncer, closing: it may take longer than the
        group's timeout) while every rank keeps the group alive; returns its result on the leader (None on the
        others). An exception it raised is raised on every rank, as the same type where that is one of
        atoll's or a built-in one (RuntimeError otherwise)."""
        import torch

        beat = torch.zeros(1, dtype=torch.int64)
        every = min(1.0, (self.timeout or 60.0) / 8)
        if not self.leader:
            while True:
                self.broadcast(beat)
                if beat[0] == 1:
                    break
            _raise_shared(self.broadcast_object(None))
            return None
        done = threading.Event()
        box: dict = {}

        def run() -> None:
            try:
                box["value"] = work()
            except BaseException as e:  # handed to every rank below
                box["error"] = e
            finally:
                done.set()

        worker = threading.Thread(target=run, name="atoll-island-leader", daemon=True)
        worker.start()
        while True:
            finished = done.wait(every)
            beat[0] = 1 if finished else 0
            self.broadcast(beat)
            if finished:
                break
        worker.join()
        error = box.get("error")
        self.broadcast_object(None if error is None else (_shared_type(error), str(error)))
        if error is not None:
            raise error
        return box.get("value")


def _shared_type(error: BaseException) -> str:
    """The name under which ``error``'s type crosses to the other ranks (see _raise_shared)."""
    import builtins

    from . import _atoll

    t = type(error)
    for name in ("Refused", "Unavailable", "RunOver"):
        if t is getattr(_atoll, name):
            return name
    return t.__name__ if getattr(builtins, t.__name__, None) is t else "RuntimeError"


def _raise_shared(shared: Optional[Tuple[str, str]]) -> None:
    import builtins

    from . import _atoll

    if shared is None:
        return
    name, message = shared
    t = getattr(_atoll, name, None) or getattr(builtins, name, RuntimeError)
    try:
        error = t(message)
    except Exception:
        error = RuntimeError(message)
    raise error


class Header:
    """A boundary's header: one all-reduce (a sum) a boundary carries each rank's tokens and loss and the
    leader's view of the learner and of what the boundary does (the others add zeros): after the fields
    below, three slots per fragment: updated (1), the update's scale, read (1). So every rank learns at once
    which fragments the boundary moves."""

    (TOKENS, LOSS, LOSSES, OVER, FAILED, REFUSED, FREEZE, MOMENTS, MOMENTS_STEP, READ_MOMENTS, WELCOMED, STOPPING,
     STEPS, BOOKED, GO, HAND, FIELDS) = range(17)
    UPDATED, SCALE, READ = range(3)

    def __init__(self, fragments: int) -> None:
        import torch

        self.fragments = fragments
        self.values = torch.zeros(self.FIELDS + 3 * fragments, dtype=torch.float64)

    def __getitem__(self, field: int) -> float:
        return self.values[field].item()

    def __setitem__(self, field: int, value: float) -> None:
        self.values[field] = value

    def describe(self, state: Any, request: Any, adam: bool, reads: Sequence[int]) -> None:
        """The leader's part: the learner's `state`, and what `request` does (`reads`: the fragments to read
        now; moments only with an Adam-style optimizer, `adam`)."""
        self[self.OVER], self[self.FAILED], self[self.REFUSED] = state.over, state.failed, state.refused
        self[self.WELCOMED], self[self.STOPPING] = state.welcomed, state.stopping
        self[self.STEPS], self[self.BOOKED] = state.steps, state.tokens
        if request is None:
            return
        self[self.FREEZE] = request.freeze
        for u in request.updates:  # at most one a fragment: updates compose
            self[self._slot(self.UPDATED, u.fragment)] = 1
            self[self._slot(self.SCALE, u.fragment)] = u.scale
        for f in reads:
            self[self._slot(self.READ, f)] = 1
        self[self.READ_MOMENTS] = request.read_moments and adam
        if request.moments is not None and adam:
            self[self.MOMENTS], self[self.MOMENTS_STEP] = 1, request.moments.step

    def where(self, which: int) -> List[int]:
        """The fragments whose slot `which` (UPDATED, READ) is set, ascending."""
        at = self._slot(which, 0)
        return [f for f, v in enumerate(self.values[at:at + self.fragments].tolist()) if v]

    def scale(self, fragment: int) -> float:
        return self[self._slot(self.SCALE, fragment)]

    def _slot(self, which: int, fragment: int) -> int:
        return self.FIELDS + which * self.fragments + fragment


def layout_difference(mine: list, leader: list) -> str:
    for k, (a, b) in enumerate(zip(mine, leader)):
        if a != b:
            return f"its parameter {k} is {a[0]} {a[1]} where the leader's is {b[0]} {b[1]}"
    return f"it has {len(mine)} parameters where the leader has {len(leader)}"


def hand_split_holding(name: str, local: Any, shard: Any) -> Tuple[tuple, Holding]:
    """(full shape, holding) of a parameter split by hand: ``shard`` is (full_shape, first_row)."""
    try:
        full, first = shard
        full = tuple(int(d) for d in full)
        first = int(first)
    except (TypeError, ValueError):
        raise ValueError(f"shards[{name!r}] must be (full_shape, first_row), got {shard!r}") from None
    if not full or local.dim() != len(full) or tuple(local.shape[1:]) != full[1:]:
        raise ValueError(f"shards[{name!r}]: this rank's {list(local.shape)} is not a block of rows of "
                         f"{list(full)}")
    if first < 0 or first + local.shape[0] > full[0]:
        raise ValueError(f"shards[{name!r}]: rows {first}..{first + local.shape[0]} are outside the "
                         f"{full[0]} rows of {list(full)}")
    return full, Holding(first * math.prod(full[1:]), local.numel(), False)


def dtensor_holding(name: str, p: Any, ranks: int) -> Tuple[tuple, Holding]:
    """(full shape, holding) of a DTensor parameter: Shard(0) (FSDP2's fully_shard) or Replicate on a 1-D mesh
    over the island's ranks."""
    mesh, placements = p.device_mesh, tuple(p.placements)
    if mesh.ndim != 1 or mesh.size() != ranks:
        raise ValueError(f"parameter {name} is a DTensor on a {mesh.ndim}-D mesh of {mesh.size()} ranks: atoll "
                         f"reads one sharded over the island's {ranks} ranks (fully_shard on the island's group)")
    kind = type(placements[0]).__name__
    if kind == "Replicate":
        return tuple(p.shape), Holding(0, p.numel(), True)
    if kind != "Shard" or getattr(placements[0], "dim", None) != 0:
        raise ValueError(f"parameter {name} is a DTensor placed as {placements[0]}: atoll reads Shard(0) "
                         "(fully_shard's) or Replicate()")
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:  # torch before 2.4
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    local_shape, offset = compute_local_shape_and_global_offset(p.shape, mesh, placements)
    full = tuple(p.shape)
    return full, Holding(int(offset[0]) * math.prod(full[1:]) if full else 0, math.prod(local_shape), False)
