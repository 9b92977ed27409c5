"""Chaos suites from Python: a fault plan run in every mode it names, and its verdict."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from . import _atoll
from .runs import _topology_of
from .topology import PathLike, Topology


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
