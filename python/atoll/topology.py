"""Topology: every knob of a run, read from a file or set from Python, checked as atoll checks a file."""
from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any, Mapping, Union

from . import _atoll

PathLike = Union[str, "os.PathLike[str]"]


def _toml_value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
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
    """A run's topology: every knob, with atoll's defaults (runtime/config/include/atoll/topology.h).

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
        pairs = _overrides(source) if isinstance(source, Mapping) else []
        self._apply(pairs + [(key.replace("__", "."), value) for key, value in keys.items()])

    @classmethod
    def _from_toml(cls, text: str) -> "Topology":
        t = cls.__new__(cls)
        t._toml = text
        return t

    def set(self, key: str, value: Any) -> "Topology":
        """Sets ``key`` (dotted: ``"outer.quorum"``) to ``value`` and returns this topology."""
        self._apply([(key, value)])
        return self

    def _apply(self, pairs: list) -> None:
        """Sets every (key, value) at once: the topology is checked whole, after the last."""
        if not pairs:
            return
        for key, _ in pairs:
            if not isinstance(key, str):
                raise TypeError(f"Topology.set: key must be a str, got {type(key).__name__}")
        assignments = [f"{key}={_toml_value(value, key)}" for key, value in pairs]
        try:
            self._toml = _atoll.parse_topology(self._toml, "topology", assignments)
        except ValueError as e:
            why = str(e)
            for (key, value), assignment in zip(pairs, assignments):
                if why.startswith(f"--set {assignment}: "):
                    raise ValueError(f"set({key!r}, {value!r:.60}): {why.removeprefix(f'--set {assignment}: ')}") \
                        from None
            raise ValueError(f"Topology: {why}") from None

    def to_dict(self) -> dict:
        """Every key and its value, as nested dicts."""
        return json.loads(_atoll.topology_json(self._toml))

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
