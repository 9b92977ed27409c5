"""atoll model files from Python: a module's parameters written for a syncer, and a global model read back."""
from __future__ import annotations

import os
from typing import Any, Union

from . import _atoll
from .tensors import gather, layout_shape, named_parameters, scatter

PathLike = Union[str, "os.PathLike[str]"]


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
    params = named_parameters(model, "save_model")
    _atoll.save_model(os.fspath(path), [(n, list(p.shape)) for n, p in params], gather([p for _, p in params]),
                      description or type(model).__name__)


def load_model(model: Any, path: PathLike) -> str:
    """Puts the values of an atoll model file into ``model``'s parameters, in place; returns its description.

    The file comes from :func:`save_model`, or from ``atoll syncer
    --save-model`` at the end of a run (the global model). The module must
    have the same parameters (names and shapes): otherwise ValueError names
    the first that differ, and nothing is changed.
    """
    params = named_parameters(model, "load_model")
    tensors, values, description = _atoll.load_model(os.fspath(path))
    ours = [(n, layout_shape(p.shape)) for n, p in params]
    theirs = [(n, layout_shape(d)) for n, d in tensors]
    if ours != theirs:
        raise ValueError(f"load_model: {path} does not fit this module: " + _difference(ours, theirs))
    scatter(values, [p for _, p in params])
    return description


def _difference(ours: list, theirs: list) -> str:
    if len(ours) != len(theirs):
        head = f"the module has {len(ours)} tensors, the file {len(theirs)}"
    else:
        head = f"{len(ours)} tensors each"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"{head}; tensor {i}: module {a[0]} {list(a[1])}, file {b[0]} {list(b[1])}"
    return head
