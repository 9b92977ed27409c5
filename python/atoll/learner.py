"""Learner: any PyTorch training loop as a Decoupled DiLoCo learner of an ``atoll syncer``."""
from __future__ import annotations

import math
import numbers
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from . import _atoll
from ._atoll import Refused, Unavailable
from .evaluator import Evaluator
from .tensors import check_parameter, host_buffer, named_parameters, view
from .topology import Topology
from .transfers import PendingRead, Transfers

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

    Raises at construction: TypeError / ValueError for parameters atoll
    cannot exchange or a layout that is not the run's; :class:`Refused`
    when the syncer refuses (token, id, or "full": no free open slot) or
    no TLS handshake with it succeeds within ``wait_seconds``;
    :class:`Unavailable` when no syncer answers within ``wait_seconds``;
    :class:`RunOver` when the syncer there is idle after its run.

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
    allocated for the copies (``allocations``: pinned ones with a GPU; a few
    in a run).

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
                 overlap: Optional[bool] = None) -> None:
        import torch

        self._native = None
        self._closed = True  # until joined: __del__ has nothing to close
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
        self._shapes = [tuple(p.shape) for _, p in self._params]
        self._offsets = [0]
        for _, p in self._params:
            self._offsets.append(self._offsets[-1] + p.numel())
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"Learner: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._adam = isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam))
        if token is None:
            token = _atoll.load_token(os.fspath(token_file) if token_file is not None else "")
        tls = [os.fspath(x) if x is not None else "" for x in (tls_cert, tls_key, tls_ca)]
        self._evaluator = evaluator
        self._evaluation: Optional[dict] = None  # evaluated, to go with the next step
        self._broken: Optional[str] = None  # a step failed between taking and handing: why
        self._native = _atoll.Learner.join(
            syncer, id, token, [(n, list(p.shape)) for n, p in self._params], float(speed), batch_size,
            tls[0], tls[1], tls[2], tls_name, float(wait_seconds), float(give_up_seconds), float(timeout_seconds))
        # Per fragment: (tensor, offset in the fragment, values, offset in the tensor): a whole tensor, or
        # in a syncer in shards a block of a large one's rows.
        self._pieces = self._native.fragments()
        self._sizes = [sum(piece[2] for piece in f) for f in self._pieces]
        cuda = any(p.is_cuda for _, p in self._params)
        self._transfers = Transfers(self._tensor, self._pieces, self._sizes, cuda,
                                    lambda number, seconds: self._native is None or
                                    self._native.released(number, seconds))
        self._overlap = cuda if overlap is None else overlap
        self._pending: Optional[PendingRead] = None  # fragments copied at the last boundary, handed at this one
        self.timings = {"steps": 0, "request": 0.0, "adopt": 0.0, "read": 0.0, "wait": 0.0, "hand": 0.0,
                        "evaluate": 0.0, "allocations": 0}
        self._closed = False
        # The global model as adopted when the learner closed, and its versions.
        self.final_global: Optional[_atoll.Floats] = None
        self.final_versions: list = []

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
        native = self._live()
        if self._broken is not None:
            raise ValueError(f"Learner.step: an earlier step failed while it changed the parameters ({self._broken}); "
                             "they may no longer be what atoll thinks: close this learner and start a new one")
        clock, t = time.perf_counter, self.timings
        started = clock()
        waited = self._transfers.waited
        request = native.request()
        requested = clock()
        try:
            if request.updates:
                self._transfers.apply(request.updates)
            if request.moments is not None:
                self._load_moments(request.moments)
            adopted = clock()
            reads, pending, read_at = self._reads(request)
            values = self._transfers.collect(pending) if pending is not None else None
            moments = self._read_moments() if request.read_moments else None
        except BaseException as e:  # the adopted versions were taken and maybe half applied
            self._broken = f"{type(e).__name__}: {e}"
            raise
        read = clock()
        evaluation, self._evaluation = self._evaluation, None
        number = native.hand(int(tokens), loss, reads, values, moments, evaluation, request.freeze, read_at)
        if pending is not None:
            self._transfers.lent(pending, number)
        state = native.state()
        handed = clock()
        t["steps"] += 1
        t["request"] += requested - started
        t["adopt"] += adopted - requested
        t["read"] += read - adopted
        t["wait"] += self._transfers.waited - waited
        t["hand"] += handed - read
        t["allocations"] = self._transfers.allocations
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
        """
        return self._live().wait_welcome(float(seconds))

    @property
    def id(self) -> int:
        """This learner's id: the one given, or the open slot the syncer gave it."""
        return self._live().id()

    def leave(self, seconds: float = 30.0) -> Optional[dict]:
        """Departs in order while the run goes on, and returns this learner's side of the report.

        The learner stops, hands its last progress over (it reads the
        parameters once more, here, in this thread), the syncer merges it and
        records a departure, not a failure; then the learner is closed. Waits
        up to ``seconds`` for the syncer to confirm; past that the last
        progress may be lost. Safe to call after :meth:`close` (returns None).
        """
        if self._closed or self._native is None:
            return None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds < 1e7:
            raise ValueError(f"Learner.leave: seconds must be a positive number, got {seconds!r}")
        self._native.leave("Learner.leave()", float(seconds))
        return self.close(seconds)

    @property
    def state(self) -> LearnerState:
        """Where this learner stands (:class:`LearnerState`)."""
        s = self._live().state()
        return LearnerState(welcomed=s.welcomed, over=s.over, why=s.why, failed=s.failed, refused=s.refused,
                            stopping=s.stopping, incarnation=s.incarnation, versions=list(s.versions),
                            steps=s.steps, tokens=s.tokens)

    @property
    def topology(self) -> "Topology":
        """The run's topology, as the syncer told it."""
        return Topology._from_toml(self._live().topology())

    def global_parameters(self) -> Tuple[dict, list]:
        """The global model as this learner adopted it: ({name: CPU float32 tensor}, versions per fragment)."""
        values, versions = self._live().global_parameters()
        return self._by_name(values), list(versions)

    def load_global(self, module: Any) -> list:
        """Copies the global model as adopted into ``module`` (same parameters); returns its versions."""
        import torch

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
        twice.
        """
        if self._closed or self._native is None:
            return None
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

    def __enter__(self) -> "Learner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_native", None) is not None and not getattr(self, "_closed", True):
            try:
                self._native.close(0.0)
            except Exception:
                pass

    # -- moving tensors

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
        name, p = self._params[index]
        check_parameter(name, p, self._shapes[index])
        return p

    def _reads(self, request: "_atoll.Request") -> Tuple[list, Optional[PendingRead], Optional[int]]:
        """What this boundary hands: (fragments, their read, the request that read them; None: this one)."""
        late, self._pending = self._pending, None
        if request.freeze or request.read_moments or not self._overlap:
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

    def _read_moments(self) -> Optional["_atoll.Moments"]:
        import torch

        if not self._adam:
            return None
        total = self._offsets[-1]
        m_values, m = host_buffer(total)  # zeros: parameters the optimizer does not hold have no moments
        v_values, v = host_buffer(total)
        step = 0
        groups = self._optimized()
        with torch.no_grad():
            for (_, p), a, b in zip(self._params, self._offsets, self._offsets[1:]):
                if id(p) not in groups:
                    continue
                st = self._optimizer.state.get(p)
                if not st or "exp_avg" not in st:
                    return None  # no step taken yet: nothing worth giving
                m[a:b].copy_(st["exp_avg"].detach().reshape(-1).float())
                v[a:b].copy_(st["exp_avg_sq"].detach().reshape(-1).float())
                s = st.get("step", 0)
                step = max(step, int(s.item() if torch.is_tensor(s) else s))
        return _atoll.Moments(step, m_values, v_values)

    def _load_moments(self, moments: "_atoll.Moments") -> None:
        import torch

        if not self._adam:
            return  # other optimizers keep their own state (see the class's docs)
        step, m, v = moments.step, view(moments.m), view(moments.v)
        groups = self._optimized()
        with torch.no_grad():
            for (_, p), a, b in zip(self._params, self._offsets, self._offsets[1:]):
                group = groups.get(id(p))
                if group is None:
                    continue  # the optimizer does not train it: no state to give it
                st = self._optimizer.state[p]
                old = st.get("step")
                st["exp_avg"] = m[a:b].view(p.shape).to(p.device, p.dtype, copy=True)
                st["exp_avg_sq"] = v[a:b].view(p.shape).to(p.device, p.dtype, copy=True)
                if group.get("amsgrad"):
                    st["max_exp_avg_sq"] = st["exp_avg_sq"].clone()
                if torch.is_tensor(old):
                    st["step"] = torch.tensor(float(step), dtype=old.dtype, device=old.device)
                elif group.get("fused") or group.get("capturable"):  # their step lives on the device
                    st["step"] = torch.tensor(float(step), dtype=torch.float32, device=p.device)
                else:
                    st["step"] = torch.tensor(float(step))
