"""Evaluator: held-out quality of the global model, measured by the user's own function on a learner."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .tensors import named_parameters, view

if TYPE_CHECKING:
    from .learner import Learner


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
    every evaluation this learner made, as dicts (``loss``, ``bits_per_byte``,
    ``accuracy``, ``count``, ``versions``); the last, after
    :meth:`Learner.close`, is of the final global model it adopted.
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
        self._params = named_parameters(module, "Evaluator")
        self._last = None  # the oldest fragment version at the last evaluation

    def _due(self, versions: Sequence[int]) -> bool:
        return bool(versions) and (self._last is None or min(versions) >= self._last + self.every_versions)

    def evaluate(self, learner: "Learner") -> dict:
        """Evaluates the global model ``learner`` holds now and returns the result (it is not sent)."""
        import torch

        values, versions = learner._native.global_parameters()
        if len(values) == 0:
            raise ValueError("Evaluator: the learner holds no global model yet (it was never welcomed)")
        source = view(values)
        at = 0
        with torch.no_grad():
            for (name, p), shape in zip(self._params, learner._shapes):
                if tuple(p.shape) != shape:
                    raise ValueError(f"Evaluator: its module's parameter {name} is {list(p.shape)}, the learner's "
                                     f"{list(shape)}: give it a copy of the model the learner trains")
                n = p.numel()
                p.copy_(source[at:at + n].view(p.shape))
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
