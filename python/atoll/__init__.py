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

The compiled part (``atoll._atoll``) links neither libtorch nor NumPy:
parameters cross as float32 buffers, so any torch works (Debian's, or a CUDA
build) beside NumPy 1, NumPy 2 or none, without a rebuild. ``torch`` is
imported only by what needs it; NumPy never.

The package is split by concern: ``learner`` (Learner, LearnerState),
``island`` (many ranks of torch.distributed as one learner),
``evaluator``, ``model_files`` (save_model, load_model), ``topology``,
``runs`` (run, Run), ``chaos_suites`` (chaos, ChaosVerdict), and ``tensors``
(moving values between torch tensors and atoll). Import them from ``atoll``.
"""

from __future__ import annotations

from . import _atoll
from ._atoll import Refused, RunOver, Unavailable
from .chaos_suites import ChaosVerdict, chaos
from .evaluator import Evaluator
from .island import IslandFailed
from .learner import Learner, LearnerState
from .model_files import save_model, load_model
from .runs import Run, run
from .topology import Topology

__version__: str = _atoll.__version__

__all__ = [
    "Learner", "Evaluator", "LearnerState", "save_model", "load_model", "Topology", "run", "Run", "chaos",
    "ChaosVerdict", "Refused", "Unavailable", "RunOver", "IslandFailed", "set_log_level", "make_token",
]

Refused.__module__ = Unavailable.__module__ = RunOver.__module__ = __name__
Refused.__doc__ = ("The syncer refused this learner: a wrong token, an id not in the run, another model; or no TLS "
                   "handshake with it within wait_seconds (certificates, plain TCP against TLS).")
Unavailable.__doc__ = "No syncer answered within wait_seconds, or it was lost for longer than give_up_seconds."
RunOver.__doc__ = ("The run this learner would join is over: its syncer stays up only to say so (atoll syncer "
                   "--after-run wait). Nothing is left to train; a Kubernetes Job's pod can exit 0.")


def set_log_level(level: str) -> None:
    """atoll's own log lines (stderr) below ``level`` are dropped: "debug", "info" (default), "warn", "error"."""
    _atoll.set_log_level(level)


def make_token() -> str:
    """A fresh cluster token: 32 random bytes as 64 hex digits. Keep it in a file of mode 600."""
    return _atoll.make_token()
