"""Runs of atoll's own learners in this process (the ``atoll run`` command's), scripted from Python."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

from . import _atoll
from .topology import PathLike, Topology


class Run:
    """A run of atoll's own learners in this process (the ``atoll run`` command's).

    Made by :func:`run`. ``view()`` shows it now (the status page's JSON: tokens,
    losses, goodput, each learner), ``stop()`` ends it early, ``wait()`` blocks
    until it ends and returns the report (the JSON ``atoll run --report``
    writes). ``kill_learner(id)`` and ``stall_learner(id, seconds)`` inject
    faults; ``add_learner(speed, batch_size)`` starts a newcomer in a free open
    slot (``membership.max_learners``) and ``leave_learner(id)`` makes one
    depart in order; ``port`` is where it serves learners (``listen=``);
    ``parameters()`` is the global model after ``wait()``, as a float32
    memoryview (``numpy.asarray()`` or ``torch.frombuffer()`` read it
    without a copy).
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

    def parameters(self) -> memoryview:
        return memoryview(self._native.parameters())

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
