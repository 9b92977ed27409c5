"""atoll from Python: your own PyTorch loop as a Decoupled DiLoCo learner, and runs scripted.

A learner keeps its own model, data loader, optimizer and device. After each
optimizer step it calls ``learner.step(tokens=n, loss=value)``; atoll hands the
syncer the fragments that fell due (copied to host memory and encoded off the
Python thread) and puts the global versions it adopts into the parameters in
place, between steps, never waiting for the network::

    import atoll, torch
    model = GPT().to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with atoll.Learner(model, "syncer.example.org:7070", id=0, token_file="token", optimizer=opt) as learner:
        for x, y in loader:
            loss = model(x, y)
            opt.zero_grad(); loss.backward(); opt.step()
            if not learner.step(tokens=x.numel(), loss=loss.item()):
                break                      # the run is over

The syncer is ``atoll syncer`` (a topology whose ``model.kind`` is
``"external"``, whose model file :func:`save_model` writes, or a TorchScript
model of the same layout). :class:`Evaluator` measures the global model with
your own function; the figure reaches the syncer's report, metrics and plots.

:class:`Topology`, :func:`run` and :func:`chaos` script atoll's own runs and
chaos suites (the ``atoll`` command's ``run`` and ``chaos``) from Python.

The compiled part (``atoll._atoll``) links no libtorch: parameters cross as
float32 numpy arrays, so any torch works (Debian's, or a CUDA build), without
a rebuild. ``torch`` is imported only by what needs it.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _atoll
from ._atoll import Refused, Unavailable

__all__ = [
    "Learner", "Evaluator", "LearnerState", "save_model", "load_model", "Topology", "run", "Run", "chaos",
    "ChaosVerdict", "Refused", "Unavailable", "set_log_level", "make_token",
]

Refused.__module__ = Unavailable.__module__ = __name__
Refused.__doc__ = ("The syncer refused this learner: a wrong token, an id not in the run, another model; or no TLS "
                   "handshake with it within wait_seconds (certificates, plain TCP against TLS).")
Unavailable.__doc__ = "No syncer answered within wait_seconds, or it was lost for longer than give_up_seconds."

PathLike = Union[str, "os.PathLike[str]"]


def set_log_level(level: str) -> None:
    """atoll's own log lines (stderr) below ``level`` are dropped: "debug", "info" (default), "warn", "error"."""
    _atoll.set_log_level(level)


def make_token() -> str:
    """A fresh cluster token: 32 random bytes as 64 hex digits. Keep it in a file of mode 600."""
    return _atoll.make_token()


# ---- parameters


def _named_parameters(model: Any, what: str) -> list:
    """[(name, tensor)] of a module, or of named_parameters() given directly; a tied weight once."""
    import torch

    if isinstance(model, torch.nn.Module):
        pairs = list(model.named_parameters())
    else:
        try:
            pairs = list(model)
        except TypeError:
            raise TypeError(f"{what}: expected a torch.nn.Module or its named_parameters(), "
                            f"got {type(model).__name__}") from None
    out, seen = [], set()
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"{what}: expected (name, tensor) pairs, got {item!r:.80}")
        name, p = item
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{what}: parameter {name} is a {type(p).__name__}, not a torch.Tensor")
        if id(p) in seen:
            continue
        seen.add(id(p))
        _check_parameter(name, p, tuple(p.shape))
        out.append((name, p))
    if not out:
        raise ValueError(f"{what}: there are no parameters to train")
    return out


def _check_parameter(name: str, p: Any, shape: tuple) -> None:
    import torch

    if p.dtype != torch.float32:
        raise TypeError(f"parameter {name} is {p.dtype}: atoll exchanges float32 parameters "
                        "(keep float32 weights; compute in bf16 with torch.autocast)")
    if p.layout != torch.strided:
        raise TypeError(f"parameter {name} is a {p.layout} tensor: atoll exchanges dense parameters")
    if tuple(p.shape) != shape:
        raise ValueError(f"parameter {name} changed its shape from {list(shape)} to {list(p.shape)} during the "
                         "run: a run's parameters keep their shapes")
    if not p.is_contiguous():
        raise ValueError(f"parameter {name} {list(p.shape)} is not contiguous: atoll reads and writes a parameter "
                         "as one block (make it contiguous when the module is built)")


def save_model(model: Any, path: PathLike, description: str = "") -> None:
    """Writes the parameters of ``model`` (a module, or its named_parameters()) as an atoll model file.

    The file holds each parameter's name, shape and float32 values, in a
    checksummed frame, written atomically (its folder is made if missing).
    A syncer whose topology says
    ``model.kind = "external"`` and ``model.path = <path>`` takes its layout
    and initial weights from it; so write it from the module your learners
    train. Raises TypeError or ValueError for a parameter atoll cannot
    exchange (not float32, not contiguous), OSError when the file cannot be
    written.
    """
    import torch

    params = _named_parameters(model, "save_model")
    with torch.no_grad():
        values = np.concatenate([p.detach().to("cpu").reshape(-1).numpy() for _, p in params]).astype(np.float32)
    _atoll.save_model(os.fspath(path), [(n, list(p.shape)) for n, p in params], values,
                      description or type(model).__name__)


def load_model(model: Any, path: PathLike) -> str:
    """Puts the values of an atoll model file into ``model``'s parameters, in place; returns its description.

    The file comes from :func:`save_model`, or from ``atoll syncer
    --save-model`` at the end of a run (the global model). The module must
    have the same parameters (names and shapes): otherwise ValueError names
    the first that differ, and nothing is changed.
    """
    import torch

    params = _named_parameters(model, "load_model")
    tensors, values, description = _atoll.load_model(os.fspath(path))
    ours = [(n, _shape(p.shape)) for n, p in params]
    theirs = [(n, _shape(d)) for n, d in tensors]
    if ours != theirs:
        raise ValueError(f"load_model: {path} does not fit this module: " + _difference(ours, theirs))
    at = 0
    with torch.no_grad():
        for _, p in params:
            n = p.numel()
            p.copy_(torch.from_numpy(values[at:at + n]).view(p.shape))
            at += n
    return description


def _shape(dims: Sequence[int]) -> tuple:
    """A shape as atoll's layout has it: a scalar is one value, (1,)."""
    return tuple(dims) or (1,)


def _difference(ours: list, theirs: list) -> str:
    if len(ours) != len(theirs):
        head = f"the module has {len(ours)} tensors, the file {len(theirs)}"
    else:
        head = f"{len(ours)} tensors each"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"{head}; tensor {i}: module {a[0]} {list(a[1])}, file {b[0]} {list(b[1])}"
    return head


# ---- learners


@dataclass
class LearnerState:
    """Where a learner stands, as of the last call.

    welcomed: it adopted a global model (before that, steps are not counted).
    over: the run is over for it (``why`` says why); failed: because of a
    refusal or a lost syncer. stopping: the run is ending and took its last
    progress. versions: per fragment, the global version adopted. steps and
    tokens: booked since the first welcome of this incarnation.
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


class Evaluator:
    """Measures the global model with your own function, and tells the syncer.

    The syncer cannot run a model it does not know, so held-out quality comes
    from the learners: give one learner an Evaluator. Each time every fragment
    of the global model it holds has advanced ``every_versions`` versions, the
    learner copies that global model into ``module`` (your own copy of the
    model: ``copy.deepcopy(model)``, never the one you train) and calls
    ``fn(module)``, on the training thread, between two steps. ``fn`` returns
    the mean held-out loss in nats per token, or a dict with ``loss`` and any
    of ``bits_per_byte``, ``accuracy`` (0..1) and ``count`` (tokens
    evaluated). The figure reaches the syncer's report (``eval``, ``curve``),
    its metrics endpoint (``atoll_eval_loss``) and plots. ``results`` keeps
    every evaluation this learner made; the last, after :meth:`Learner.close`,
    is of the final global model it adopted.
    """

    def __init__(self, module: Any, fn: Callable[[Any], Any], *, every_versions: int = 10) -> None:
        if not callable(fn):
            raise TypeError(f"Evaluator: fn must be callable, got {type(fn).__name__}")
        if isinstance(every_versions, bool) or not isinstance(every_versions, int) or every_versions < 1:
            raise ValueError(f"Evaluator: every_versions must be an int >= 1, got {every_versions!r}")
        self.module = module
        self.fn = fn
        self.every_versions = every_versions
        self.results: list = []
        self._params = _named_parameters(module, "Evaluator")
        self._last = None  # the oldest fragment version at the last evaluation

    def _due(self, versions: Sequence[int]) -> bool:
        return bool(versions) and (self._last is None or min(versions) >= self._last + self.every_versions)

    def evaluate(self, learner: "Learner") -> dict:
        """Evaluates the global model ``learner`` holds now and returns the result (it is not sent)."""
        import torch

        values, versions = learner._native.global_parameters()
        if values.size == 0:
            raise ValueError("Evaluator: the learner holds no global model yet (it was never welcomed)")
        at = 0
        with torch.no_grad():
            for (name, p), shape in zip(self._params, learner._shapes):
                if tuple(p.shape) != shape:
                    raise ValueError(f"Evaluator: its module's parameter {name} is {list(p.shape)}, the learner's "
                                     f"{list(shape)}: give it a copy of the model the learner trains")
                n = p.numel()
                p.copy_(torch.from_numpy(values[at:at + n]).view(p.shape))
                at += n
        out = self.fn(self.module)
        r = dict(out) if isinstance(out, Mapping) else {"loss": out}
        for key in r:
            if key not in ("loss", "bits_per_byte", "accuracy", "count"):
                raise ValueError(f"Evaluator: fn returned an unknown key {key!r} "
                                 "(expected loss, bits_per_byte, accuracy, count)")
        try:
            result = {"loss": float(r["loss"]), "bits_per_byte": float(r.get("bits_per_byte", math.nan)),
                      "accuracy": float(r.get("accuracy", math.nan)), "count": int(r.get("count", 1)),
                      "versions": list(versions)}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"Evaluator: fn must return a loss or a dict with 'loss' (floats), got {out!r:.80}: "
                             f"{e}") from None
        if not math.isfinite(result["loss"]) or result["loss"] < 0:
            raise ValueError(f"Evaluator: fn returned the loss {result['loss']}: expected a finite loss >= 0")
        bpb, accuracy = result["bits_per_byte"], result["accuracy"]
        if not (math.isnan(bpb) or (math.isfinite(bpb) and bpb >= 0)):
            raise ValueError(f"Evaluator: fn returned bits_per_byte {bpb}: expected a finite number >= 0")
        if not (math.isnan(accuracy) or 0 <= accuracy <= 1):
            raise ValueError(f"Evaluator: fn returned the accuracy {accuracy}: expected a share from 0 to 1")
        if result["count"] < 1:
            raise ValueError(f"Evaluator: fn returned count {result['count']}: expected the tokens evaluated, >= 1")
        self._last = min(versions)
        self.results.append(result)
        return result


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
            restarted learner gets a healthy peer's moments in its state, and
            its own moments are given to restarted peers. Other optimizers:
            nothing of theirs is exchanged; a restarted learner starts with a
            fresh optimizer state (its first steps are larger than usual).
        speed, batch_size: its speed and batch size for the syncer's report
            (0: the topology's); the batch size also weighs its merges, as
            tokens per step.
        evaluator: an :class:`Evaluator` that measures the global model.
        tls_cert, tls_key, tls_ca, tls_name: TLS 1.3 with mutual
            certificates (``atoll certs``), as for ``atoll learner``.
        wait_seconds: how long to wait for the syncer to answer at the start.
        give_up_seconds: how long to train on without a syncer before
            :meth:`step` raises :class:`Unavailable`.
        timeout_seconds: a connection silent this long is dropped (and retried).

    Raises at construction: TypeError / ValueError for parameters atoll
    cannot exchange or a layout that is not the run's; :class:`Refused`
    when the syncer refuses (token, id, or "full": no free open slot) or
    no TLS handshake with it succeeds within ``wait_seconds``;
    :class:`Unavailable` when no syncer answers within ``wait_seconds``.

    The learner joins at once and is welcomed shortly after (its parameters
    are then set to the global model, and with AdamW a peer's moments are
    loaded). Steps before the welcome train on but are not counted: the
    welcome overwrites them. :meth:`wait_welcome` waits for it.

    Use it as a context manager, or call :meth:`close`: a Ctrl-C in the loop
    then leaves in order. To depart while the run goes on (a preemption
    notice, a machine needed elsewhere), call :meth:`leave`: the last
    progress is merged and the syncer records a departure, not a failure.
    """

    def __init__(self, model: Any, syncer: str, *, id: Optional[int] = None, token: Optional[str] = None,
                 token_file: Optional[PathLike] = None, optimizer: Any = None, speed: float = 0.0,
                 batch_size: int = 0, evaluator: Optional[Evaluator] = None, tls_cert: Optional[PathLike] = None,
                 tls_key: Optional[PathLike] = None, tls_ca: Optional[PathLike] = None, tls_name: str = "",
                 wait_seconds: float = 60.0, give_up_seconds: float = 60.0, timeout_seconds: float = 5.0) -> None:
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
        if token is not None and not isinstance(token, str):
            raise TypeError(f"Learner: token must be a str, got {type(token).__name__}")
        self._params = _named_parameters(model, "Learner")
        if evaluator is not None and any(a is b for (_, a), (_, b) in zip(self._params, evaluator._params)):
            raise ValueError("Learner: the evaluator's module is the one you train: give it its own copy "
                             "(copy.deepcopy(model)), or evaluating would overwrite the training progress")
        self._shapes = [tuple(p.shape) for _, p in self._params]
        self._offsets = np.cumsum([0] + [p.numel() for _, p in self._params]).tolist()
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
        self._pieces = self._native.fragments()  # per fragment: (tensor, offset in the fragment, values)
        self._sizes = [sum(n for _, _, n in f) for f in self._pieces]
        self._cuda_devices = sorted({p.device.index or 0 for _, p in self._params if p.is_cuda})
        self._cuda = bool(self._cuda_devices)
        self._staging: dict = {}  # pinned host buffers by size, for reads from a GPU
        self._closed = False
        # The global model as adopted when the learner closed, and its versions.
        self.final_global: Optional[np.ndarray] = None
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
        if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < 0:
            raise ValueError(f"Learner.step: tokens must be an int >= 0, got {tokens!r}")
        loss = math.nan if loss is None else float(loss)
        native = self._live()
        if self._broken is not None:
            raise ValueError(f"Learner.step: an earlier step failed while it changed the parameters ({self._broken}); "
                             "they may no longer be what atoll thinks: close this learner and start a new one")
        request = native.request()
        try:
            if request["updates"]:
                self._apply(request["updates"])
            if request["moments"] is not None:
                self._load_moments(request["moments"])
            values = self._read(request["reads"]) if request["reads"] else None
            moments = self._read_moments() if request["read_moments"] else None
        except BaseException as e:  # the adopted versions were taken and maybe half applied
            self._broken = f"{type(e).__name__}: {e}"
            raise
        evaluation, self._evaluation = self._evaluation, None
        native.hand(int(tokens), loss, request["reads"], values, moments, evaluation, request["freeze"])
        state = native.state()
        if state["failed"]:
            self._raise(state)
        # Evaluated after the step is handed, so that the user's function failing costs no step;
        # the figure goes with the next one.
        if (self._evaluator is not None and state["welcomed"] and not request["freeze"] and
                self._evaluator._due(state["versions"])):
            self._evaluation = self._evaluator.evaluate(self)
        return not (state["over"] or request["freeze"])

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
        return LearnerState(**self._live().state())

    @property
    def topology(self) -> "Topology":
        """The run's topology, as the syncer told it."""
        return Topology._from_toml(self._live().topology())

    def global_parameters(self) -> Tuple[dict, list]:
        """The global model as this learner adopted it: ({name: float32 array}, versions per fragment)."""
        values, versions = self._live().global_parameters()
        return self._by_name(values), list(versions)

    def load_global(self, module: Any) -> list:
        """Copies the global model as adopted into ``module`` (same parameters); returns its versions."""
        import torch

        values, versions = (self._native.global_parameters() if self._native is not None
                            else (self.final_global, self.final_versions))
        if values is None or values.size == 0:
            raise ValueError("load_global: this learner never held a global model (it was never welcomed)")
        params = _named_parameters(module, "load_global")
        if [tuple(p.shape) for _, p in params] != self._shapes:
            raise ValueError("load_global: the module's parameters are not this learner's")
        with torch.no_grad():
            for (_, p), a, b in zip(params, self._offsets, self._offsets[1:]):
                p.copy_(torch.from_numpy(values[a:b]).view(p.shape))
        return list(versions)

    def close(self, seconds: float = 30.0) -> Optional[dict]:
        """Leaves the run and returns this learner's side of the report (None if it had failed).

        If the run is ending, first hands over the frozen replica and waits up
        to ``seconds`` for the syncer's end, so that the last progress is
        merged and the last global versions are adopted; an :class:`Evaluator`
        then evaluates that final model (its ``results[-1]``). Otherwise it
        stops at once: what was not pushed is lost, as with a failure. Safe to
        call twice.
        """
        if self._closed or self._native is None:
            return None
        native = self._native
        deadline = time.monotonic() + float(seconds)
        frozen = False
        while native.state()["stopping"] and not native.state()["over"] and time.monotonic() < deadline:
            request = native.request()
            # The frozen replica, for the last pulls: read again when a version was adopted since.
            if (not frozen or request["updates"]) and self._broken is None:
                if request["updates"]:
                    self._apply(request["updates"])
                values = self._read(request["reads"]) if request["reads"] else None
                native.hand(0, math.nan, request["reads"], values, None, None, True)
                frozen = True
            time.sleep(0.02)
        if self._evaluator is not None and native.state()["welcomed"]:
            try:
                self._evaluator.evaluate(self)
            except Exception as e:  # the report must not be lost to the user's function
                print(f"atoll: the final evaluation failed: {e}", file=sys.stderr)
        self.final_global, self.final_versions = native.global_parameters()
        self._closed = True
        report = native.close(0.0)
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

    def _raise(self, state: dict) -> None:
        why = state["why"] or "the learner failed"
        raise (Refused if state["refused"] else Unavailable)(why)

    def _by_name(self, values: np.ndarray) -> dict:
        return {n: values[a:b].reshape(s) for (n, _), s, a, b in
                zip(self._params, self._shapes, self._offsets, self._offsets[1:])} if values.size else {}

    def _tensor(self, index: int) -> Any:
        name, p = self._params[index]
        _check_parameter(name, p, self._shapes[index])
        return p

    def _apply(self, updates: list) -> None:
        import torch

        with torch.no_grad():
            for fragment, scale, offset in updates:
                source = torch.from_numpy(offset)
                for index, at, n in self._pieces[fragment]:
                    p = self._tensor(index)
                    b = source[at:at + n].view(p.shape).to(p.device, non_blocking=False)
                    if scale == 0.0:
                        p.copy_(b)
                    elif scale == 1.0:
                        p.add_(b)
                    else:
                        p.mul_(scale).add_(b)

    def _read(self, reads: list) -> np.ndarray:
        import torch

        total = sum(self._sizes[f] for f in reads)
        out = np.empty(total, dtype=np.float32)
        target = torch.from_numpy(out)
        if self._cuda:  # device to pinned host memory, then one wait
            staging = self._staging.get(total)
            if staging is None:
                staging = self._staging[total] = torch.empty(total, dtype=torch.float32, pin_memory=True)
            target_device = staging
        else:
            target_device = target
        base = 0
        with torch.no_grad():
            for f in reads:
                for index, at, n in self._pieces[f]:
                    p = self._tensor(index)
                    target_device[base + at:base + at + n].copy_(p.detach().reshape(-1), non_blocking=self._cuda)
                base += self._sizes[f]
        if self._cuda:
            for device in self._cuda_devices:
                torch.cuda.synchronize(device)
            target.copy_(staging)
        return out

    def _optimized(self) -> dict:
        """{id(parameter): its param_group} of the optimizer."""
        return {id(p): g for g in self._optimizer.param_groups for p in g["params"]}

    def _read_moments(self) -> Optional[tuple]:
        import torch

        if not self._adam:
            return None
        total = self._offsets[-1]
        m = np.zeros(total, dtype=np.float32)  # parameters the optimizer does not hold: no moments
        v = np.zeros(total, dtype=np.float32)
        step = 0
        groups = self._optimized()
        with torch.no_grad():
            for (_, p), a, b in zip(self._params, self._offsets, self._offsets[1:]):
                if id(p) not in groups:
                    continue
                st = self._optimizer.state.get(p)
                if not st or "exp_avg" not in st:
                    return None  # no step taken yet: nothing worth giving
                torch.from_numpy(m[a:b]).copy_(st["exp_avg"].detach().reshape(-1).float().cpu())
                torch.from_numpy(v[a:b]).copy_(st["exp_avg_sq"].detach().reshape(-1).float().cpu())
                s = st.get("step", 0)
                step = max(step, int(s.item() if torch.is_tensor(s) else s))
        return (step, m, v)

    def _load_moments(self, moments: tuple) -> None:
        import torch

        if not self._adam:
            return  # other optimizers keep their own state (see the class's docs)
        step, m, v = moments
        groups = self._optimized()
        with torch.no_grad():
            for (_, p), a, b in zip(self._params, self._offsets, self._offsets[1:]):
                group = groups.get(id(p))
                if group is None:
                    continue  # the optimizer does not train it: no state to give it
                st = self._optimizer.state[p]
                old = st.get("step")
                st["exp_avg"] = torch.from_numpy(m[a:b]).view(p.shape).to(p.device, p.dtype).clone()
                st["exp_avg_sq"] = torch.from_numpy(v[a:b]).view(p.shape).to(p.device, p.dtype).clone()
                if group.get("amsgrad"):
                    st["max_exp_avg_sq"] = st["exp_avg_sq"].clone()
                if torch.is_tensor(old):
                    st["step"] = torch.tensor(float(step), dtype=old.dtype, device=old.device)
                elif group.get("fused") or group.get("capturable"):  # their step lives on the device
                    st["step"] = torch.tensor(float(step), dtype=torch.float32, device=p.device)
                else:
                    st["step"] = torch.tensor(float(step))


# ---- topologies, runs and chaos suites


def _toml_value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            raise ValueError(f"{where}: {v} is not a finite number")
        return repr(float(v))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(x, f'{where}.{k}')}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x, f"{where}[{i}]") for i, x in enumerate(v)) + "]"
    raise TypeError(f"{where}: a {type(v).__name__} has no TOML form")


def _overrides(d: Mapping, prefix: str = "") -> list:
    out = []
    for k, v in d.items():
        if not isinstance(k, str):
            raise TypeError(f"topology key {k!r} is not a string")
        key = prefix + k
        if isinstance(v, Mapping):
            out += _overrides(v, key + ".")
        else:
            out.append((key, v))
    return out


class Topology:
    """A run's topology: every knob, with atoll's defaults (runtime/include/atoll/topology.h).

    ``Topology()`` is the built-in default job; ``Topology("file.toml")`` reads
    a topology file; ``Topology({"mode": "dp", "outer": {"quorum": 2}})`` sets
    keys over the default, as nested dicts or dotted keys; keyword arguments
    with dotted keys as ``outer__quorum=2`` do the same. ``set(key, value)``
    changes one key and returns the topology. Every value is checked as a
    topology file's is, and errors name the key: ``ValueError: set('outer.quorm',
    2): outer.quorm: unknown key (did you mean outer.quorum?)``.
    """

    def __init__(self, source: Union[None, PathLike, Mapping] = None, **keys: Any) -> None:
        if source is None or isinstance(source, Mapping):
            self._toml = _atoll.default_topology()
        elif isinstance(source, (str, os.PathLike)):
            self._toml = _atoll.load_topology(os.fspath(source), [])
        else:
            raise TypeError(f"Topology: expected a file path or a dict, got {type(source).__name__}")
        for key, value in _overrides(source or {}) if isinstance(source, Mapping) else []:
            self.set(key, value)
        for key, value in keys.items():
            self.set(key.replace("__", "."), value)

    @classmethod
    def _from_toml(cls, text: str) -> "Topology":
        t = cls.__new__(cls)
        t._toml = text
        return t

    def set(self, key: str, value: Any) -> "Topology":
        """Sets ``key`` (dotted: ``"outer.quorum"``) to ``value`` and returns this topology."""
        if not isinstance(key, str):
            raise TypeError(f"Topology.set: key must be a str, got {type(key).__name__}")
        where = f"set({key!r}, {value!r:.60})"
        assignment = f"{key}={_toml_value(value, key)}"
        try:
            self._toml = _atoll.parse_topology(self._toml, "topology", [assignment])
        except ValueError as e:
            raise ValueError(f"{where}: {str(e).removeprefix('--set ' + assignment + ': ')}") from None
        return self

    def to_dict(self) -> dict:
        """Every key and its value, as nested dicts."""
        import tomllib

        return tomllib.loads(self._toml)

    def __getitem__(self, key: str) -> Any:
        node: Any = self.to_dict()
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(key)
            node = node[part]
        return node

    def to_toml(self) -> str:
        """The topology as a file that ``atoll run`` and ``Topology(path)`` read back to the same."""
        return self._toml

    def save(self, path: PathLike) -> None:
        """Writes :meth:`to_toml` to ``path``."""
        with open(path, "w") as f:
            f.write(self._toml)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        d = self.to_dict()
        return (f"Topology(mode={d['mode']!r}, model={d['model']['kind']!r}, learners={len(d['learners'])}, "
                f"tokens={d['tokens']})")


class Run:
    """A run of atoll's own learners in this process (the ``atoll run`` command's).

    Made by :func:`run`. ``view()`` shows it now (the status page's JSON: tokens,
    losses, goodput, each learner), ``stop()`` ends it early, ``wait()`` blocks
    until it ends and returns the report (the JSON ``atoll run --report``
    writes). ``kill_learner(id)`` and ``stall_learner(id, seconds)`` inject
    faults; ``add_learner(speed, batch_size)`` starts a newcomer in a free open
    slot (``membership.max_learners``) and ``leave_learner(id)`` makes one
    depart in order; ``port`` is where it serves learners (``listen=``);
    ``parameters()`` is the global model after ``wait()``.
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        self.report: Optional[dict] = None

    def view(self) -> dict:
        return self._native.view()

    def stop(self) -> None:
        self._native.stop()

    @property
    def finished(self) -> bool:
        return self.report is not None or self._native.finished()

    @property
    def port(self) -> int:
        return self._native.port()

    def kill_learner(self, id: int) -> bool:
        return self._native.kill_learner(id)

    def stall_learner(self, id: int, seconds: float) -> bool:
        return self._native.stall_learner(id, float(seconds))

    def add_learner(self, speed: float = 1.0, batch_size: int = 8) -> int:
        """A newcomer joins this run in a free open slot and trains; returns its id.

        Raises :class:`Refused` ("full") when every open slot is taken.
        """
        return self._native.add_learner(float(speed), int(batch_size))

    def leave_learner(self, id: int, drain_seconds: float = 30.0) -> bool:
        """Learner ``id`` departs in order (its last progress is merged); False if it is not running."""
        return self._native.leave_learner(id, "Run.leave_learner()", float(drain_seconds))

    def wait(self) -> dict:
        if self.report is None:
            try:
                self.report = self._native.wait()
            except KeyboardInterrupt:
                self._native.stop()
                self.report = self._native.wait()
        return self.report

    def parameters(self) -> np.ndarray:
        return self._native.parameters()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.report is None:
            self.stop()
            self.wait()


def _topology_of(topology: Union[None, "Topology", PathLike, Mapping]) -> "Topology":
    return topology if isinstance(topology, Topology) else Topology(topology)


def run(topology: Union[None, Topology, PathLike, Mapping] = None, *, seconds: float = 0.0,
        data_root: Optional[PathLike] = None, run_name: str = "", compute_threads: int = 0, curve_points: int = 0,
        listen: str = "", token: str = "", tls_cert: str = "", tls_key: str = "", tls_ca: str = "",
        tls_name: str = "", save_model: str = "") -> Run:
    """Starts a run of ``topology`` in this process and returns its :class:`Run` (``atoll run``).

    ``listen="HOST:PORT"`` (with ``token``) holds the syncer only, and
    learners join from other processes (``atoll syncer``): Python learners
    (:class:`Learner`) too. ``save_model`` writes the final global model as
    a model file. Raises ValueError naming what is wrong with the topology,
    FileNotFoundError for a missing data set.
    """
    options = {"seconds": float(seconds), "data_root": os.fspath(data_root) if data_root else "",
               "run_name": run_name, "compute_threads": int(compute_threads), "curve_points": int(curve_points),
               "listen": listen, "token": token, "tls_cert": tls_cert, "tls_key": tls_key, "tls_ca": tls_ca,
               "tls_name": tls_name, "save_model": save_model}
    return Run(_atoll.Run(_topology_of(topology).to_toml(), options))


@dataclass
class ChaosVerdict:
    """What a chaos plan did to a run: ``ok`` when every invariant held in every mode.

    ``results`` has one dict per mode (plan, mode, goodput, faults injected
    and recovered, violations, the full report); ``violations`` lists each
    broken invariant with its figures; ``table`` is ``atoll chaos``'s table.
    ``bool(verdict)`` is ``ok``.
    """
    results: list
    table: str
    violations: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def __bool__(self) -> bool:
        return self.ok


def chaos(plan: PathLike, topology: Union[None, Topology, PathLike, Mapping] = None, *,
          data_root: Optional[PathLike] = None, tape_dir: Optional[PathLike] = None) -> ChaosVerdict:
    """Runs the fault plan ``plan`` (a plan file, as ``atoll chaos`` reads) and returns its :class:`ChaosVerdict`.

    ``topology`` replaces the plan's own. The plan runs in every mode it
    names, with its fault-free baseline when it bounds the eval loss.
    ``tape_dir`` keeps the event tapes. Raises ValueError or
    FileNotFoundError for a bad plan.
    """
    if not isinstance(plan, (str, os.PathLike)):
        raise TypeError(f"chaos: plan must be a plan file's path, got {type(plan).__name__}")
    toml = None if topology is None else _topology_of(topology).to_toml()
    results, table = _atoll.run_chaos(os.fspath(plan), toml, os.fspath(data_root) if data_root else "",
                                      os.fspath(tape_dir) if tape_dir else "")
    violations = [f"{r['plan']} ({r['mode']}): {v}" for r in results for v in r.get("violations", [])]
    return ChaosVerdict(results=results, table=table, violations=violations)
