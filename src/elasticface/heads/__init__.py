"""Margin heads: what each changes of a face classifier's logits, with no class weights.

Every head subclasses :class:`MarginHead` and states its rule once, as a plan (plan.py): the target
logit of rows with a label >= 0 (curriculum / mis-classified-vector / circle heads also map the
negatives), in fp32 (float64 stays float64) even under autocast. ``build_head(name, **kwargs)``
builds one by name from the registry (registry.py), the one home of every head's defaults and the
one list of the ``head=<name>`` options; the table of the heads, generated from it: docs/heads.md.

Why these defaults: ``thmm`` is what insightface and pytorch-metric-learning ship for additive
angular margins and keeps the target monotone in θ; the Elastic heads share ArcFace's so that
σ = 0 reduces to it exactly (the released ElasticFace code used ``none``). ``continuous`` is
SphereFace's own ψ and the only guard monotone for every m1. ``clip`` is AdaFace's. ``exact``
gradients are what the ArcFace, ElasticFace, MagFace and AdaFace papers' code backpropagate;
``straight_through`` (current insightface) is a constructor switch away.

The classes are imported on first use (``from elasticface.heads import ArcFace`` works as usual): the
registry and the names of the heads read without torch, for the commands' ``--help``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .registry import HEADS, build_head, head_names

#: the contract's own names and the module each lives in
_CONTRACT = {"MarginHead": ".base", "HeadInputs": ".plan", "HeadPlan": ".plan", "SubCenter": ".subcenter"}


def _lazy_names() -> dict[str, str]:
    """Every exported class and its module: the contract's, and each registry entry's of this package."""
    names = dict(_CONTRACT)
    for entry in HEADS.values():
        module, _, name = entry.cls.partition(":")
        if module.startswith("."):
            names[name] = module
    return names


def __getattr__(name: str) -> Any:
    module = _lazy_names().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_lazy_names()))


__all__ = ["build_head", "head_names", *sorted(_lazy_names())]
