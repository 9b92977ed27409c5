"""Learner: any PyTorch training loop as a Decoupled DiLoCo learner of an ``atoll syncer``."""
from __future__ import annotations

import hashlib
import math
import numbers
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from . import _atoll
from ._atoll import Refused, Unavailable
from .evaluator import Evaluator
from .island import (Header, Holding, Island, check_holdings, dtensor_holding, hand_split_holding, layout_difference,
                     share)
from .tensors import as_state_of, check_parameter, host_buffer, local_tensor, named_parameters, view
from .topology import Topology
from .transfers import MomentsCopy, PendingRead, Transfers, buffer_of

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class LearnerState:
    """Where a learner stands, as of the last call.

    welcomed: it adopted a global model (before that, steps are not counted).
    over: the run is over for it (``why`` says why); failed: because of a
    refusal or a lost syncer. stopping: the run is ending and took its last
    progress. versions: per fragment, the global version adopted. steps and
    tokens: booked since the first welcome of this incarnation, by the
    learner's actor, which takes each step a moment after :meth:`Learner.step`
    returns: read right after a step, the newest one may not be in yet (the
    syncer's report, at the end, has them all).
    """
    welcomed: bool
    over: bool
    why: str
    failed: bool
    refused: bool
    stopping: bool
    incarnation: int
    versions: list
    steps: int
    tokens: int


class Learner:
    """Any PyTorch training loop as an atoll learner (Decoupled DiLoCo).

    Args:
        model: the module you train (or its ``named_parameters()``). Every
            parameter must be a dense, contiguous float32 tensor, on any
            device; a tied weight counts once. The names and shapes must be
            the run's model (``atoll syncer`` tells it when the learner
            joins): otherwise ValueError names both layouts where they differ.
        syncer: ``"HOST:PORT"`` of ``atoll syncer``.
        id: this learner's id: one of the topology's learners (0 .. M-1), or
            a free open slot. None: the syncer gives it the lowest free open
            slot (``membership.max_learners``); :attr:`id` tells which.
        token / token_file: the cluster token, as a value or a file (mode
            600); neither: ``$ATOLL_TOKEN``.
        optimizer: your optimizer. With ``torch.optim.AdamW`` (or Adam), a
            learner that joins after a peer has trained (a restart, a
            newcomer, or one that comes late at the start of a run) gets the
            moments of the peer that trained the most in its state, and its
            own moments are given to such learners. Other optimizers:
            nothing of theirs is exchanged; a restarted learner starts with a
            fresh optimizer state (its first steps are larger than usual).
        speed, batch_size: labels for the syncer's report (0: the topology's
            entry for this id). batch_size counts examples (sequences) per
            step, as a topology's ``[[learners]] batch_size`` does; merges
            are weighted by the ``tokens`` each :meth:`step` passes, not by it.
        evaluator: an :class:`Evaluator` that measures the global model.
        tls_cert, tls_key, tls_ca, tls_name: TLS 1.3 with mutual
            certificates (``atoll certs``), as for ``atoll learner``.
        wait_seconds: how long to wait for the syncer to answer at the start.
        give_up_seconds: how long to train on without a syncer before
            :meth:`step` raises :class:`Unavailable`.
        timeout_seconds: a connection silent this long is dropped (and retried).
        overlap: copy the fragments due to host memory while the next step
            runs, and hand them over at its boundary, so that :meth:`step`
            never waits for the device (atoll.transfers). None (default): on
            when a parameter is on a GPU. False: read and hand them at their
            own boundary, waiting for the device to finish the step.
        group: a ``torch.distributed`` process group whose ranks train this
            one replica together (DDP, or a model sharded among them): the
            island is one learner (atoll.island). Every rank of the group
            makes the Learner with the same arguments and calls
            :meth:`step` at the same steps; rank 0 of the group (the leader)
            holds the connections. ``tokens`` and ``batch_size`` are each
            rank's: the island's are their sums. The group's timeout must be
            at most 300 s (a hung rank fails the island within it). None
            (default): this process alone is the learner.
        shards: in an island, the parameters split among its ranks by hand:
            ``{name: (full_shape, first_row)}``, this rank holding rows
            ``first_row ..`` of the full tensor (its local tensor's rows).
            DTensor parameters (FSDP2's ``fully_shard``) say it themselves;
            every other parameter is replicated (the same on every rank).

    Raises at construction: TypeError / ValueError for parameters atoll
    cannot exchange or a layout that is not the run's; :class:`Refused`
    when the syncer refuses (token, id, or "full": no free open slot) or
    no TLS handshake with it succeeds within ``wait_seconds``;
    :class:`Unavailable` when no syncer answers within ``wait_seconds``;
    :class:`RunOver` when the syncer there is idle after its run. In an
    island, every rank raises what its leader met; ranks that disagree
    (layout, syncer, id, token, speed, optimizer) are refused with a
    ValueError naming the rank and the difference; and
    :class:`~atoll.island.IslandFailed` once a rank died or hung.

    The learner joins at once and is welcomed shortly after (its parameters
    are then set to the global model, and with AdamW a peer's moments are
    loaded). Steps before the welcome train on but are not counted: the
    welcome overwrites them. :meth:`wait_welcome` waits for it.

    Use it as a context manager, or call :meth:`close`: a Ctrl-C in the loop
    then leaves in order. To depart while the run goes on (a preemption
    notice, a machine needed elsewhere), call :meth:`leave`: the last
    progress is merged and the syncer records a departure, not a failure.

    ``timings`` says where :meth:`step` spends its time: wall seconds summed
    since the learner was made, by part (``request``, ``adopt``: putting
    adopted versions and moments in place, ``read``: copying fragments out,
    ``wait``: of which waiting for the device, ``hand``: handing them to
    atoll, ``evaluate``), the number of ``steps``, and of host buffers
    allocated for the copies (``allocations``: pinned ones with a GPU; all
    made with the learner, none in the loop).

    Memory for the copies, reserved when the learner is made: two slots for
    reads, each the size of the whole model in float32 (on a GPU, pinned, and
    two more for uploads); with Adam(W), the moments' m and v once more in
    host memory (pinned on a GPU) and, on each GPU, a copy of the moments it
    holds, taken in stream order so that reading them never waits for the
    device. An 86M-parameter model on a GPU: 6 x 345 MB pinned, 690 MB more
    on the device.

    After :meth:`close`, ``final_global`` holds the global model as this
    learner last adopted it (an ``_atoll.Floats`` of float32 values in
    ``named_parameters()`` order; :meth:`load_global` puts it into a module)
    and ``final_versions`` its version per fragment.
    """

    def __init__(self, model: Any, syncer: str, *, id: Optional[int] = None, token: Optional[str] = None,
                 token_file: Optional[PathLike] = None, optimizer: Any = None, speed: float = 0.0,
                 batch_size: int = 0, evaluator: Optional[Evaluator] = None, tls_cert: Optional[PathLike] = None,
                 tls_key: Optional[PathLike] = None, tls_ca: Optional[PathLike] = None, tls_name: str = "",
                 wait_seconds: float = 60.0, give_up_seconds: float = 60.0, timeout_seconds: float = 5.0,
                 overlap: Optional[bool] = None, group: Any = None,
                 shards: Optional[Mapping[str, Tuple[Sequence[int], int]]] = None) -> None:
        import torch

        self._native = None
        self._closed = True  # until joined: __del__ has nothing to close
        # An island: its collectives first, so that a rank's bad argument is every rank's error, not a hang.
        self._island: Optional[Island] = Island(group) if group is not None else None
        if shards is not None and group is None:
            raise ValueError("Learner: shards name the parameters split among an island's ranks: give the group too")
        if not isinstance(syncer, str):
            raise TypeError(f"Learner: syncer must be 'HOST:PORT', got {type(syncer).__name__}")
        if id is not None and (isinstance(id, bool) or not isinstance(id, int) or id < 0):
            raise ValueError(f"Learner: id must be an int >= 0 or None (a free open slot), got {id!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"Learner: batch_size must be an int >= 0, got {batch_size!r}")
        if not isinstance(speed, (int, float)) or isinstance(speed, bool) or not 0 <= speed <= 1e6:
            raise ValueError(f"Learner: speed must be a number in [0, 1e6], got {speed!r}")
        for name, v in (("wait_seconds", wait_seconds), ("give_up_seconds", give_up_seconds),
                        ("timeout_seconds", timeout_seconds)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < 1e7:
                raise ValueError(f"Learner: {name} must be a positive number of seconds, got {v!r}")
        if evaluator is not None and not isinstance(evaluator, Evaluator):
            raise TypeError(f"Learner: evaluator must be an atoll.Evaluator, got {type(evaluator).__name__}")
        if overlap is not None and not isinstance(overlap, bool):
            raise TypeError(f"Learner: overlap must be True, False or None, got {overlap!r}")
        if token is not None and not isinstance(token, str):
            raise TypeError(f"Learner: token must be a str, got {type(token).__name__}")
        self._params = named_parameters(model, "Learner")
        if evaluator is not None and any(a is b for (_, a), (_, b) in zip(self._params, evaluator._params)):
            raise ValueError("Learner: the evaluator's module is the one you train: give it its own copy "
                             "(copy.deepcopy(model)), or evaluating would overwrite the training progress")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"Learner: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._adam = isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam))
        self._evaluator = evaluator
        self._evaluation: Optional[dict] = None  # evaluated, to go with the next step
        self._broken: Optional[str] = None  # a step failed between taking and handing: why
        tls = [os.fspath(x) if x is not None else "" for x in (tls_cert, tls_key, tls_ca)]
        if self._island is None:
            self._local_shapes = [tuple(p.shape) for _, p in self._params]
            self._shapes = list(self._local_shapes)
            if token is None:
                token = _atoll.load_token(os.fspath(token_file) if token_file is not None else "")
            self._native = _atoll.Learner.join(
                syncer, id, token, self._layout(), float(speed), batch_size, tls[0], tls[1], tls[2], tls_name,
                float(wait_seconds), float(give_up_seconds), float(timeout_seconds))
            self._id = self._native.id()
            # Per fragment: (tensor, offset in the fragment, values, offset in the tensor): a whole tensor, or
            # in a syncer in shards a block of a large one's rows.
            self._pieces = self._native.fragments()
        else:
            token = self._island_agree(syncer, id, token, token_file, speed, batch_size, shards, tls, tls_name,
                                       overlap)
            self._island_join(syncer, id, token, speed, tls, tls_name, wait_seconds, give_up_seconds,
                              timeout_seconds)
        self._offsets = [0]
        for shape in self._shapes:
            self._offsets.append(self._offsets[-1] + math.prod(shape))
        self._sizes = [sum(piece[2] for piece in f) for f in self._pieces]
        cuda = any(local_tensor(p).is_cuda for _, p in self._params)
        released = (lambda number, seconds: self._native is None or self._native.released(number, seconds))
        if self._island is None:
            self._transfers = Transfers(self._tensor, self._pieces, self._sizes, cuda, released)
            self._writer, self._reader = self._transfers, None
            self._moments = MomentsCopy(self._offsets[-1], self._devices_trained(), released) if self._adam else None
        else:
            self._island_plan(cuda, released)
        self._overlap = (cuda if overlap is None else overlap) and not self._sharded()
        self._pending: Optional[PendingRead] = None  # fragments copied at the last boundary, handed at this one
        self.timings = {"steps": 0, "request": 0.0, "adopt": 0.0, "read": 0.0, "wait": 0.0, "hand": 0.0,
                        "evaluate": 0.0, "allocations": 0}
        self._closed = False
        # The global model as adopted when the learner closed, and its versions.
        self.final_global: Optional[_atoll.Floats] = None
        self.final_versions: list = []

    def _layout(self) -> list:
        return [(n, list(shape)) for (n, _), shape in zip(self._params, self._shapes)]

    # -- the loop

    def step(self, tokens: int, loss: Optional[float] = None) -> bool:
        """Call after each optimizer step: ``tokens`` trained in it, and its ``loss`` if you have it.

        Puts the global versions adopted since the last call into the
        parameters (in place, under ``torch.no_grad()``), copies the fragments
        that fell due (or were asked for) to host memory, and hands them to the
        learner actor, which encodes and sends them. Never waits for the
        network. Returns True while the run goes on, False once it is over for
        this learner (stop training then, and :meth:`close`). Raises
        :class:`Refused` or :class:`Unavailable` if the learner failed, and
        ValueError if a parameter changed its shape.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, numbers.Integral) or tokens < 0:
            raise ValueError(f"Learner.step: tokens must be an int >= 0, got {tokens!r}")
        loss = math.nan if loss is None else float(loss)
        if self._broken is not None:
            raise ValueError(f"Learner.step: an earlier step failed while it changed the parameters ({self._broken}); "
                             "they may no longer be what atoll thinks: close this learner and start a new one")
        if self._island is not None:
            if self._closed:
                raise ValueError("the learner is closed")
            return self._island_step(int(tokens), loss)
        native = self._live()
        clock, t = time.perf_counter, self.timings
        started = clock()
        waited = self._waited()
        request = native.request()
        requested = clock()
        try:
            if request.updates:
                self._transfers.apply(request.updates)
            if request.moments is not None:
                self._load_moments(request.moments.step, view(request.moments.m), view(request.moments.v),
                                   self._whole_model()[0])
            adopted = clock()
            reads, pending, read_at = self._reads(request)
            values = self._transfers.collect(pending) if pending is not None else None
            lent_moments, coming = self._moments_due(request)
        except BaseException as e:  # the adopted versions were taken and maybe half applied
            self._broken = f"{type(e).__name__}: {e}"
            raise
        read = clock()
        evaluation, self._evaluation = self._evaluation, None
        number = native.hand(int(tokens), loss, reads, values, None, evaluation, request.freeze, read_at,
                             lent_moments, coming)
        if pending is not None:
            self._transfers.lent(pending, number)
        if lent_moments is not None:
            self._moments.lent(number)
        state = native.state()
        handed = clock()
        self._book(started, requested, adopted, read, handed, waited)
        if state.failed:
            self._raise(state)
        # Evaluated after the step is handed, so that the user's function failing costs no step;
        # the figure goes with the next one.
        if (self._evaluator is not None and state.welcomed and not request.freeze and
                self._evaluator._due(state.versions)):
            r = self._evaluator.evaluate(self)
            self._evaluation = _atoll.Evaluation(r["loss"], r["bits_per_byte"], r["accuracy"], r["count"],
                                                 r["versions"])
            t["evaluate"] += clock() - handed
        return not (state.over or request.freeze)

    def wait_welcome(self, seconds: float = 60.0) -> bool:
        """Waits up to ``seconds`` until the syncer welcomed this learner; True if it did.

        The global model is in the parameters after the next :meth:`step`
        (or call ``step(tokens=0)`` once to put it there before training).
        In an island, every rank calls it.
        """
        if self._island is None:
            return self._live().wait_welcome(float(seconds))
        if self._closed:
            raise ValueError("the learner is closed")
        welcomed = self._island.while_leader(lambda: self._native.wait_welcome(float(seconds)))
        return bool(self._island.broadcast_object(welcomed))

    @property
    def id(self) -> int:
        """This learner's id: the one given, or the open slot the syncer gave it (an island's, on every rank)."""
        if self._closed:
            raise ValueError("the learner is closed")
        return self._id

    def leave(self, seconds: float = 30.0) -> Optional[dict]:
        """Departs in order while the run goes on, and returns this learner's side of the report.

        The learner stops, hands its last progress over (it reads the
        parameters once more, here, in this thread), the syncer merges it and
        records a departure, not a failure; then the learner is closed. Waits
        up to ``seconds`` for the syncer to confirm; past that the last
        progress may be lost. Safe to call after :meth:`close` (returns None).
        In an island, every rank calls it.
        """
        if self._closed:
            return None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds < 1e7:
            raise ValueError(f"Learner.leave: seconds must be a positive number, got {seconds!r}")
        if self._island is None:
            self._native.leave("Learner.leave()", float(seconds))
        else:
            self._island.while_leader(lambda: self._native.leave("Learner.leave()", float(seconds)))
        return self.close(seconds)

    @property
    def state(self) -> LearnerState:
        """Where this learner stands (:class:`LearnerState`). On an island's other ranks: as the leader told
        it at the last step (no versions, no incarnation)."""
        if self._closed:
            raise ValueError("the learner is closed")
        if self._native is None:
            return self._told
        s = self._native.state()
        return LearnerState(welcomed=s.welcomed, over=s.over, why=s.why, failed=s.failed, refused=s.refused,
                            stopping=s.stopping, incarnation=s.incarnation, versions=list(s.versions),
                            steps=s.steps, tokens=s.tokens)

    @property
    def topology(self) -> "Topology":
        """The run's topology, as the syncer told it."""
        if self._closed:
            raise ValueError("the learner is closed")
        return Topology._from_toml(self._native.topology() if self._native is not None else self._topology_toml)

    def global_parameters(self) -> Tuple[dict, list]:
        """The global model as this learner adopted it: ({name: CPU float32 tensor}, versions per fragment).
        In an island, on its leader (rank 0)."""
        values, versions = self._leader("global_parameters").global_parameters()
        return self._by_name(values), list(versions)

    def load_global(self, module: Any) -> list:
        """Copies the global model as adopted into ``module`` (same parameters, whole); returns its versions.
        In an island, on its leader (rank 0)."""
        import torch

        if self._island is not None and not self._island.leader:
            self._leader("load_global")
        values, versions = (self._native.global_parameters() if self._native is not None
                            else (self.final_global, self.final_versions))
        if values is None or len(values) == 0:
            raise ValueError("load_global: this learner never held a global model (it was never welcomed)")
        params = named_parameters(module, "load_global")
        if [tuple(p.shape) for _, p in params] != self._shapes:
            raise ValueError("load_global: the module's parameters are not this learner's")
        source = view(values)
        with torch.no_grad():
            for (_, p), a, b in zip(params, self._offsets, self._offsets[1:]):
                p.copy_(source[a:b].view(p.shape))
        return list(versions)

    def close(self, seconds: float = 30.0) -> Optional[dict]:
        """Leaves the run and returns this learner's side of the report (None if it had failed).

        If the run is ending, first hands over the frozen replica and waits up
        to ``seconds`` for the syncer's end, so that the last progress is
        merged and the last global versions are adopted; an :class:`Evaluator`
        then evaluates that final model (its ``results[-1]``) and hands the
        figure to the syncer, which waits for it (up to 60 s) and reports it
        as the run's held-out figure, marked final. Otherwise it stops at
        once: what was not pushed is lost, as with a failure. Safe to call
        twice. In an island, every rank calls it (each gets the report); after
        a rank failed, each closes alone, as a failure.
        """
        if self._closed:
            return None
        if self._island is not None:
            if self._island.failed is not None:
                return self._close_alone()
            return self._island_close(seconds)
        native = self._native
        deadline = time.monotonic() + float(seconds)
        frozen = False
        while native.state().stopping and not native.state().over and time.monotonic() < deadline:
            request = native.request()
            # The frozen replica, for the last pulls: read again when a version was adopted since.
            if (not frozen or request.updates) and self._broken is None:
                self._pending = None  # the freeze reads everything again
                if request.updates:
                    self._transfers.apply(request.updates)
                read = self._transfers.read(request.reads) if request.reads else None
                values = self._transfers.collect(read) if read is not None else None
                number = native.hand(0, math.nan, request.reads, values, None, None, True)
                if read is not None:
                    self._transfers.lent(read, number)
                frozen = True
            time.sleep(0.02)
        return self._finish(deadline)

    def __enter__(self) -> "Learner":
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        # An island whose loop raised (a rank died in the user's own collective, a Ctrl-C) closes each rank
        # alone: a collective now would wait out the group's timeout for a rank that is gone.
        if kind is not None and self._island is not None:
            self._close_alone()
        else:
            self.close()

    def __del__(self) -> None:
        if getattr(self, "_native", None) is not None and not getattr(self, "_closed", True):
            try:
                self._native.close(0.0)
            except Exception:
                pass

    # -- the end

    def _finish(self, deadline: float) -> Optional[dict]:
        """The final evaluation and the native close, on the learner (an island's leader) that holds the
        connections; returns its report."""
        native = self._native
        handed = False
        if self._evaluator is not None and native.state().welcomed:
            try:
                r = self._evaluator.evaluate(self)
                # The syncer waits for this figure of the final model: it becomes the report's.
                if native.state().final_evaluation_wanted:
                    native.hand(0, math.nan, [], None, None, _atoll.Evaluation(
                        r["loss"], r["bits_per_byte"], r["accuracy"], r["count"], r["versions"]), True)
                    handed = True
            except Exception as e:  # the report must not be lost to the user's function
                print(f"atoll: the final evaluation failed: {e}", file=sys.stderr)
        self.final_global, self.final_versions = native.global_parameters()
        self._closed = True
        # Time for the final evaluation to reach the syncer, when one was handed.
        report = native.close(max(1.0, deadline - time.monotonic()) if handed else 0.0)
        self._native = None
        return report

    def _close_alone(self) -> None:
        """Ends this rank's part without its island: the leader's connection closes as a failure (the slot
        stays the island's, for its restart), the other ranks hold nothing."""
        self._closed = True
        native, self._native = self._native, None
        if native is not None:
            native.close(0.0)

    # -- an island (atoll.island): every rank runs these at the same points

    def _sharded(self) -> bool:
        return self._island is not None and any(not h.replicated for h in self._holdings)

    def _leader(self, what: str) -> Any:
        if self._island is not None and not self._island.leader:
            raise ValueError(f"{what}: the island's leader (rank 0 of its group) holds the global model; call it "
                             "there")
        return self._live()

    def _island_agree(self, syncer: str, id: Optional[int], token: Optional[str], token_file: Any, speed: float,
                      batch_size: int, shards: Any, tls: list, tls_name: str, overlap: Optional[bool]) -> str:
        """Every rank describes what it was given; any difference, or any rank's bad argument, is every rank's
        ValueError, naming the rank. Returns the token to join with (the leader's)."""
        island = self._island
        mine: dict = {"error": None}
        try:
            self._holdings, self._shapes = self._holding(shards)
            if token is None:
                token = _atoll.load_token(os.fspath(token_file) if token_file is not None else "")
            mine.update(layout=self._layout(), holdings=[(h.start, h.count, h.replicated) for h in self._holdings],
                        syncer=syncer, id=id, speed=float(speed), batch_size=batch_size, optimizer=self._adam,
                        overlap=overlap, tls=tls + [tls_name], token=hashlib.sha256(token.encode()).hexdigest())
        except Exception as e:
            mine["error"] = f"{type(e).__name__}: {e}"
        everyone = island.all_gather_object(mine)
        for r, d in enumerate(everyone):
            if d["error"] is not None:
                raise ValueError(f"island rank {r}: {d['error']}")
        lead = everyone[0]
        for r, d in enumerate(everyone[1:], start=1):
            if d["token"] != lead["token"]:
                raise ValueError(f"island rank {r} has another cluster token than its leader (rank 0) "
                                 "(compared by hash, never sent)")
            if d["layout"] != lead["layout"]:
                raise ValueError(f"island rank {r} trains another model than its leader (rank 0): "
                                 f"{layout_difference(d['layout'], lead['layout'])}")
            for key, what in (("syncer", "syncer"), ("id", "id"), ("speed", "speed"), ("optimizer", "AdamW"),
                              ("overlap", "overlap"), ("tls", "TLS files")):
                if d[key] != lead[key]:
                    raise ValueError(f"island rank {r} disagrees with its leader (rank 0) on the {what}: "
                                     f"{d[key]!r} against {lead[key]!r}")
        self._all_holdings = [[Holding(*h) for h in d["holdings"]] for d in everyone]
        check_holdings([n for n, _ in self._params], [math.prod(s) for s in self._shapes], self._all_holdings)
        self._island_batch = sum(d["batch_size"] for d in everyone)
        return token

    def _holding(self, shards: Any) -> Tuple[List[Holding], list]:
        """This rank's holding of each parameter, and the parameters' full shapes."""
        from .tensors import is_dtensor

        shards = dict(shards or {})
        names = {n for n, _ in self._params}
        for name in shards:
            if name not in names:
                raise ValueError(f"shards names {name}, which is not a parameter of the model")
        holdings, full_shapes = [], []
        self._local_shapes = []
        for name, p in self._params:
            local = local_tensor(p)
            self._local_shapes.append(tuple(local.shape))
            if is_dtensor(p):
                shape, h = dtensor_holding(name, p, self._island.size)
            elif name in shards:
                shape, h = hand_split_holding(name, local, shards[name])
            else:
                shape, h = tuple(local.shape), Holding(0, local.numel(), True)
            holdings.append(h)
            full_shapes.append(shape)
        return holdings, full_shapes

    def _island_join(self, syncer: str, id: Optional[int], token: str, speed: float, tls: list, tls_name: str,
                     wait_seconds: float, give_up_seconds: float, timeout_seconds: float) -> None:
        """The leader joins for the island, while the others wait; then every rank knows the id, the
        fragments and the topology."""
        island = self._island

        def join() -> Any:
            return _atoll.Learner.join(syncer, id, token, self._layout(), float(speed), self._island_batch, tls[0],
                                       tls[1], tls[2], tls_name, float(wait_seconds), float(give_up_seconds),
                                       float(timeout_seconds))

        self._native = island.while_leader(join)
        told = (self._native.id(), self._native.fragments(), self._native.topology()) if island.leader else None
        self._id, self._pieces, self._topology_toml = island.broadcast_object(told)
        self._told = LearnerState(welcomed=False, over=False, why="", failed=False, refused=False, stopping=False,
                                  incarnation=0, versions=[], steps=0, tokens=0)
        self._lent: dict = {}  # gathered values lent to atoll, by step number, until released

    def _island_plan(self, cuda: bool, released: Any) -> None:
        """Every rank's plans for fragments and for the whole model (moments), and this rank's transfers."""
        model = self._whole_model()
        full_model = [self._offsets[-1]]
        island = self._island
        self._read_plans = [share(self._pieces, hs, reading=True, leader=r == 0)
                            for r, hs in enumerate(self._all_holdings)]
        self._write_plans = [share(self._pieces, hs, reading=False, leader=r == 0)
                             for r, hs in enumerate(self._all_holdings)]
        self._model_reads = [share(model, hs, reading=True, leader=r == 0) for r, hs in enumerate(self._all_holdings)]
        self._model_writes = [share(model, hs, reading=False, leader=r == 0)
                              for r, hs in enumerate(self._all_holdings)]
        # DDP: every rank writes whole vectors (a broadcast), the leader reads them alone.
        self._writes_whole = all(p.whole(self._sizes) for p in self._write_plans)
        self._model_writes_whole = all(p.whole(full_model) for p in self._model_writes)
        writes = self._write_plans[island.rank]
        # The leader of a replicated island reads through its writer's plan (its own copy of every value).
        rings = ("uploads",) if self._sharded() or not island.leader else ("uploads", "reads")
        self._transfers = Transfers(self._tensor, writes.pieces, writes.sizes, cuda, released, rings)
        self._writer = self._transfers
        reads = self._read_plans[island.rank]
        self._reader = (Transfers(self._tensor, reads.pieces, reads.sizes, cuda, released, ("reads",))
                        if self._sharded() else None)
        self._moments = None  # an island's moments cross through its collectives

    def _island_step(self, tokens: int, loss: float) -> bool:
        island, native = self._island, self._native
        clock, t = time.perf_counter, self.timings
        started = clock()
        waited = self._waited()
        header = Header(len(self._pieces))
        header[Header.TOKENS] = tokens
        if math.isfinite(loss):
            header[Header.LOSS], header[Header.LOSSES] = loss, 1
        request, state = None, None
        if island.leader:
            state = native.state()
            if not state.over:
                request = native.request()
            header.describe(state, request, self._adam, request.reads if request is not None else [])
        island.all_reduce(header.values)
        requested = clock()
        self._told = _told(header)
        if header[Header.FAILED]:
            why = island.broadcast_object(state.why if island.leader else None)
            raise (Refused if header[Header.REFUSED] else Unavailable)(why or "the learner failed")
        if header[Header.OVER]:
            return False
        freeze = bool(header[Header.FREEZE])
        try:
            self._island_adopt(request, header)
            adopted = clock()
            reads, values, read_at, lend = self._island_reads(request, header)
            moments = self._island_moments(header)
        except BaseException as e:  # the adopted versions were taken and maybe half applied
            self._broken = f"{type(e).__name__}: {e}"
            raise
        read = clock()
        if island.leader:
            evaluation, self._evaluation = self._evaluation, None
            losses = header[Header.LOSSES]
            number = native.hand(int(header[Header.TOKENS]), header[Header.LOSS] / losses if losses else math.nan,
                                 reads, values, moments, evaluation, freeze, read_at)
            self._lend(lend, number)
        handed = clock()
        self._book(started, requested, adopted, read, handed, waited)
        if island.leader and self._evaluator is not None and state.welcomed and not freeze:
            now = native.state()
            if self._evaluator._due(now.versions):  # the leader evaluates; the others go on to their next step
                r = self._evaluator.evaluate(self)
                self._evaluation = _atoll.Evaluation(r["loss"], r["bits_per_byte"], r["accuracy"], r["count"],
                                                     r["versions"])
                t["evaluate"] += clock() - handed
        return not freeze

    def _island_adopt(self, request: Any, header: Any) -> None:
        """The global versions (and a peer's moments) the leader's request brought, onto every rank's part."""
        island = self._island
        fragments, scales = header.where(Header.UPDATED), []
        if fragments:  # at most one update per fragment (they compose): their order does not matter
            scales = [header.scale(f) for f in fragments]
            by_fragment = {u.fragment: view(u.offset) for u in request.updates} if island.leader else {}
            sources = [by_fragment[f] for f in fragments] if island.leader else None
            values = island.spread(sources, fragments, self._write_plans, self._sizes, self._writes_whole)
            self._writer.apply([_Update(f, s, v) for f, s, v in zip(fragments, scales, values)])
        if header[Header.MOMENTS]:
            step = int(header[Header.MOMENTS_STEP])
            moments = request.moments if island.leader else None
            m, v = island.spread([view(moments.m), view(moments.v)] if moments else None, [0, 0], self._model_writes,
                                 [self._offsets[-1]], self._model_writes_whole)
            self._load_moments(step, m, v, self._model_writes[island.rank].pieces[0])

    def _island_reads(self, request: Any, header: Any) -> Tuple[list, Any, Optional[int], Any]:
        """What the leader hands for this boundary: (fragments, their values, read_at, what the values are lent
        from: a PendingRead, or the tensor they were gathered into). Replicated (DDP): the leader reads alone, as a
        learner of one process does; sharded: every rank reads its part of the fragments due and the leader
        gathers them."""
        island = self._island
        if not self._sharded():
            if not island.leader:
                return [], None, None, None
            reads, pending, read_at = self._reads(request)
            return reads, (self._transfers.collect(pending) if pending is not None else None), read_at, pending
        fragments = header.where(Header.READ)
        if not fragments:
            return [], None, None, None
        full = self._gather(fragments)
        return (fragments, buffer_of(full, full.numel()), None, full) if island.leader else ([], None, None, None)

    def _lend(self, lend: Any, number: int) -> None:
        """Keeps what step ``number``'s values were lent from until atoll released them."""
        if isinstance(lend, PendingRead):
            self._transfers.lent(lend, number)
        elif lend is not None:
            self._lent[number] = lend  # a gathered tensor: atoll copies it on its own thread
        self._lent = {n: t for n, t in self._lent.items() if not self._native.released(n, 0.0)}

    def _gather(self, vectors: List[int]) -> Any:
        """Every rank's part of fragments ``vectors``, read from its tensors, put together on the leader (one
        tensor, the fragments back to back); None on the others."""
        import torch

        island = self._island
        mine = torch.empty(0, dtype=torch.float32)
        if sum(self._read_plans[island.rank].sizes[v] for v in vectors):
            read = self._reader.read(vectors)
            mine = read.slot.tensor[:read.size]
        full = torch.empty(sum(self._sizes[v] for v in vectors), dtype=torch.float32) if island.leader else None
        fulls, at = [], 0
        for v in vectors:
            fulls.append(full[at:at + self._sizes[v]] if full is not None else None)
            at += self._sizes[v]
        island.gather_into(mine, vectors, self._read_plans, fulls)
        return full

    def _island_moments(self, header: Any) -> Optional["_atoll.Moments"]:
        """The optimizer's moments, when the leader's request asked: the leader's own (DDP), or every rank's
        part gathered (sharded); None when some rank has none yet."""
        import torch

        island = self._island
        if not header[Header.READ_MOMENTS]:
            return None
        if not self._sharded():
            return self._moments_to_hand() if island.leader else None
        pieces = self._model_reads[island.rank].pieces[0]
        size = self._model_reads[island.rank].sizes[0]
        m, v = torch.zeros(size, dtype=torch.float32), torch.zeros(size, dtype=torch.float32)
        step = self._read_moments(pieces, m, v)
        missing = torch.tensor([1.0 if step is None else 0.0])
        if island.all_reduce(missing)[0] > 0:
            return None  # a rank took no step yet: nothing worth giving
        total = self._offsets[-1]
        m_values, m_full = host_buffer(total) if island.leader else (None, None)
        v_values, v_full = host_buffer(total) if island.leader else (None, None)
        island.gather_into(torch.cat([m, v]), [0, 0], self._model_reads, [m_full, v_full])
        return _atoll.Moments(step, m_values, v_values) if island.leader else None

    def _island_close(self, seconds: float) -> Optional[dict]:
        """The island's end: while the run is ending, the frozen replica's last reads (every rank, as in a
        step); then the leader's final evaluation and close, the others waiting; every rank gets the report."""
        island, native = self._island, self._native
        deadline = time.monotonic() + float(seconds)
        frozen = False
        while True:
            header = Header(len(self._pieces))
            request = None
            if island.leader:
                s = native.state()
                if s.stopping and not s.over and time.monotonic() < deadline and self._broken is None:
                    request = native.request()
                    # The frozen replica: read again only when a version was adopted since.
                    hand = not frozen or bool(request.updates)
                    header.describe(s, request, self._adam, request.reads if hand else [])
                    header[Header.MOMENTS] = header[Header.READ_MOMENTS] = 0  # the end moves parameters only
                    header[Header.GO], header[Header.HAND] = 1, hand
            island.all_reduce(header.values)
            if not header[Header.GO]:
                break
            if header[Header.HAND]:
                self._pending = None  # the freeze reads everything again
                self._island_adopt(request, header)
                if self._sharded():
                    reads, values, _, lend = self._island_reads(request, header)
                elif island.leader:
                    reads = request.reads
                    lend = self._transfers.read(reads) if reads else None
                    values = self._transfers.collect(lend) if lend is not None else None
                if island.leader:
                    self._lend(lend, native.hand(0, math.nan, reads, values, None, None, True))
                frozen = True
            time.sleep(0.02)
        report = island.while_leader(lambda: self._finish(deadline))
        self._closed = True
        self._native = None
        return island.broadcast_object(report)

    # -- moving tensors

    def _book(self, started: float, requested: float, adopted: float, read: float, handed: float,
              waited: float) -> None:
        """Adds a step's parts to ``timings`` (perf_counter() at each; ``waited``: the device waits before)."""
        t = self.timings
        t["steps"] += 1
        t["request"] += requested - started
        t["adopt"] += adopted - requested
        t["read"] += read - adopted
        t["wait"] += self._waited() - waited
        t["hand"] += handed - read
        t["allocations"] = (self._transfers.allocations + (self._reader.allocations if self._reader else 0) +
                            (self._moments.allocations if self._moments else 0))

    def _waited(self) -> float:
        """Seconds the host has waited for the device so far."""
        return self._transfers.waited + (self._moments.waited if self._moments else 0.0)

    def _live(self) -> Any:
        if self._native is None:
            raise ValueError("the learner is closed")
        return self._native

    def _raise(self, state: "_atoll.State") -> None:
        why = state.why or "the learner failed"
        raise (Refused if state.refused else Unavailable)(why)

    def _by_name(self, values: "_atoll.Floats") -> dict:
        source = view(values)
        return {n: source[a:b].view(s) for (n, _), s, a, b in
                zip(self._params, self._shapes, self._offsets, self._offsets[1:])} if len(values) else {}

    def _tensor(self, index: int) -> Any:
        """Parameter ``index`` as this process holds it (a DTensor's local shard), checked."""
        name, p = self._params[index]
        local = local_tensor(p)
        check_parameter(name, local, self._local_shapes[index])
        return local

    def _whole_model(self) -> list:
        """The whole model as one vector of pieces (every tensor whole, in layout order): moments travel so."""
        return [[(i, a, b - a, 0) for i, (a, b) in enumerate(zip(self._offsets, self._offsets[1:]))]]

    def _reads(self, request: "_atoll.Request") -> Tuple[list, Optional[PendingRead], Optional[int]]:
        """What this boundary hands: (fragments, their read, the request that read them; None: this one)."""
        late, self._pending = self._pending, None
        if request.freeze or not self._overlap:
            # Read now, at this boundary; values copied at the last one are read again.
            return request.reads, (self._transfers.read(request.reads) if request.reads else None), None
        # Copied at the last boundary, they are current unless this request adopted a newer version of them.
        adopted = {u.fragment for u in request.updates}
        current = set(late.fragments) - adopted if late is not None else set()
        now = [f for f in request.reads if f not in current]
        if now:
            self._pending = self._transfers.start_read(now, request.sequence)
        if late is None:
            return [], None, None
        return late.fragments, late, late.sequence

    def _optimized(self) -> dict:
        """{id(parameter): its param_group} of the optimizer."""
        return {id(p): g for g in self._optimizer.param_groups for p in g["params"]}

    def _devices_trained(self) -> dict:
        """{GPU: values of the parameters the optimizer trains there}: what the moments' staging holds."""
        groups = self._optimized()
        out: dict = {}
        for _, p in self._params:
            local = local_tensor(p)
            if id(p) in groups and local.is_cuda:
                out[local.device] = out.get(local.device, 0) + local.numel()
        return out

    def _moments_due(self, request: "_atoll.Request") -> Tuple[Optional[Tuple[int, memoryview]], bool]:
        """The moments this boundary hands, lent, and whether they come at a later one instead.

        Asked for, they are copied at this boundary and handed at the next one
        (the pull waits), with the fragments read a boundary late beside them."""
        copy = self._moments
        if copy is None:
            return None, False
        if not request.read_moments:
            copy.drop()  # the pull was answered without them, or the learner began again
            return None, False
        if copy.pending:
            return copy.collect(), False
        pieces, step = self._moment_pieces()
        if step is None:
            return None, False  # no step taken yet: nothing worth giving
        copy.start(pieces, step)
        return None, True

    def _moment_pieces(self) -> Tuple[list, Any]:
        """(offset in the model, count, m, v) per parameter the optimizer trains, as 1-D views of its state,
        and the step count (None when a parameter has no moments yet)."""
        import torch

        groups = self._optimized()
        pieces, step = [], None
        for i, (at, end) in enumerate(zip(self._offsets, self._offsets[1:])):
            p = self._params[i][1]
            if id(p) not in groups:
                continue
            st = self._optimizer.state.get(p)
            if not st or "exp_avg" not in st:
                return [], None
            pieces.append((at, end - at, local_tensor(st["exp_avg"]).detach().reshape(-1),
                           local_tensor(st["exp_avg_sq"]).detach().reshape(-1)))
            step = st.get("step", 0)  # Adam(W) counts the same steps for every parameter
        if torch.is_tensor(step) and not step.is_cuda:
            step = int(step.item())  # on the host: read now; on a device it comes back with the moments
        return pieces, step

    def _moments_to_hand(self) -> Optional["_atoll.Moments"]:
        """This process's optimizer moments of the whole model, for atoll (None: none yet, or not AdamW)."""
        if not self._adam:
            return None
        total = self._offsets[-1]
        m_values, m = host_buffer(total)  # zeros: parameters the optimizer does not hold have no moments
        v_values, v = host_buffer(total)
        step = self._read_moments(self._whole_model()[0], m, v)
        return None if step is None else _atoll.Moments(step, m_values, v_values)

    def _read_moments(self, pieces: Sequence[Any], m: Any, v: Any) -> Optional[int]:
        """Copies the optimizer's moments of ``pieces`` (tensor, offset in m and v, count, offset in this
        process's tensor) into ``m`` and ``v``; returns the step count, or None when a parameter the optimizer
        trains has no moments yet (no step taken)."""
        import torch

        if not self._adam:
            return None
        step = 0
        groups = self._optimized()
        with torch.no_grad():
            for i, at, n, start in pieces:
                p = self._params[i][1]
                if id(p) not in groups:
                    continue
                st = self._optimizer.state.get(p)
                if not st or "exp_avg" not in st:
                    return None  # no step taken yet: nothing worth giving
                m[at:at + n].copy_(local_tensor(st["exp_avg"]).detach().reshape(-1)[start:start + n].float())
                v[at:at + n].copy_(local_tensor(st["exp_avg_sq"]).detach().reshape(-1)[start:start + n].float())
                s = st.get("step", 0)
                step = max(step, int(s.item() if torch.is_tensor(s) else s))
        return step

    def _load_moments(self, step: int, m: Any, v: Any, pieces: Sequence[Any]) -> None:
        """Puts moments into the optimizer's state: ``pieces`` (tensor, offset in m and v, count, offset in this
        process's tensor) each cover one parameter as this process holds it, whole."""
        import torch

        if not self._adam:
            return  # other optimizers keep their own state (see the class's docs)
        groups = self._optimized()
        with torch.no_grad():
            for i, at, n, _ in pieces:
                p = self._params[i][1]
                group = groups.get(id(p))
                if group is None:
                    continue  # the optimizer does not train it: no state to give it
                local = local_tensor(p)
                st = self._optimizer.state[p]
                old = st.get("step")
                st["exp_avg"] = as_state_of(p, m[at:at + n].view(local.shape).to(local.device, local.dtype, copy=True))
                st["exp_avg_sq"] = as_state_of(p, v[at:at + n].view(local.shape).to(local.device, local.dtype, copy=True))
                if group.get("amsgrad"):
                    st["max_exp_avg_sq"] = st["exp_avg_sq"].clone()
                if torch.is_tensor(old):
                    st["step"] = torch.tensor(float(step), dtype=old.dtype, device=old.device)
                elif group.get("fused") or group.get("capturable"):  # their step lives on the device
                    st["step"] = torch.tensor(float(step), dtype=torch.float32, device=local.device)
                else:
                    st["step"] = torch.tensor(float(step))


def _told(header: Any) -> LearnerState:
    """An island's other ranks' view of the learner, from a step's header."""
    return LearnerState(welcomed=bool(header[Header.WELCOMED]), over=bool(header[Header.OVER]), why="",
                        failed=bool(header[Header.FAILED]), refused=bool(header[Header.REFUSED]),
                        stopping=bool(header[Header.STOPPING]), incarnation=0, versions=[],
                        steps=int(header[Header.STEPS]), tokens=int(header[Header.BOOKED]))


@dataclass
class _Update:
    """An update as Transfers.apply takes it, with this rank's part of the values."""
    fragment: int
    scale: float
    offset: Any


