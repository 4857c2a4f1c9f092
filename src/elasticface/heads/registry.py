"""Heads by name, each entry carrying its paper's defaults (timm's `@register_model` idea): the one home of
those values. `build_head` builds from it; `configs/head/<name>.yaml` names the head and reads its top-level
m, s, sigma from here (the `${head_default:...}` resolver of the commands), so the YAML restates no value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .adacos import AdaCos
from .adaface import AdaFace
from .base import MarginHead
from .circle import Circle
from .curricularface import CurricularFace
from .elastic import ElasticArcFace, ElasticCosFace
from .li_arcface import LiArcFace
from .magface import MagFace
from .margin import ArcFace, CombinedMargin, CosFace, SphereFace
from .mv_softmax import MVSoftmax
from .softmax import NormFace, Softmax
from .subcenter import SubCenter

_SUBCENTER = "subcenter_"
_SUBCENTER_K = 3  # sub-centres per class, Deng et al. 2020's choice; also for `subcenter_<name>` without an entry


@dataclass(frozen=True)
class HeadEntry:
    """One `head=<name>` option: its class, its top-level `m`, `s`, `sigma` (null where the head has none)
    and every argument its config passes, with the paper's values; `base` for a sub-center wrapper."""

    cls: type[MarginHead]
    m: float | None = None
    s: float | None = None
    sigma: float | None = None
    args: dict[str, Any] = field(default_factory=dict)
    base: HeadEntry | None = None
    # the constructor argument a top-level key feeds when its name differs (combined: m is m2)
    aliases: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        """The constructor's arguments: `args` plus the top-level m, s, sigma the head takes."""
        top = {self.aliases.get(k, k): v for k, v in (("m", self.m), ("s", self.s), ("sigma", self.sigma))}
        return {**{k: v for k, v in top.items() if v is not None}, **self.args}


_EXACT = {"gradient": "exact"}
_ELASTIC = {"plus_assignment": "paper", "rank_scope": "local", "truncate": None, "seed": None, **_EXACT}


def _arc() -> HeadEntry:
    return HeadEntry(ArcFace, m=0.5, s=64.0, args={"guard": "thmm", **_EXACT})


def _cos() -> HeadEntry:
    return HeadEntry(CosFace, m=0.35, s=64.0, args={"guard": "none", **_EXACT})


def _elastic_arc_plus() -> HeadEntry:
    return HeadEntry(ElasticArcFace, m=0.5, s=64.0, sigma=0.0175, args={"plus": True, **_ELASTIC, "guard": "thmm"})


def _subcenter(base: HeadEntry) -> HeadEntry:
    """`base` with K sub-centres per class; its m, s, sigma are the wrapper's top-level ones."""
    return HeadEntry(SubCenter, m=base.m, s=base.s, sigma=base.sigma, args={"k": _SUBCENTER_K}, base=base)


HEADS: dict[str, HeadEntry] = {
    "adacos": HeadEntry(AdaCos, args={"num_classes": None, "dynamic": True}),
    "adacos_fixed": HeadEntry(AdaCos, args={"num_classes": None, "dynamic": False}),
    "adaface": HeadEntry(
        AdaFace, m=0.4, s=64.0, args={"h": 0.333, "t_alpha": 0.01, "eps": 0.001, "guard": "clip", **_EXACT}
    ),
    "arcface": _arc(),
    "circle": HeadEntry(Circle, m=0.25, s=256.0),
    "combined": HeadEntry(
        CombinedMargin,
        m=0.3,
        s=64.0,
        args={"m1": 1.0, "m3": 0.2, "guard": "continuous", **_EXACT},
        aliases={"m": "m2"},
    ),
    "cosface": _cos(),
    "curricularface": HeadEntry(CurricularFace, m=0.5, s=64.0, args={"momentum": 0.01, "guard": "thmm", **_EXACT}),
    "elastic_arc": HeadEntry(
        ElasticArcFace, m=0.5, s=64.0, sigma=0.05, args={"plus": False, **_ELASTIC, "guard": "thmm"}
    ),
    "elastic_arc_plus": _elastic_arc_plus(),
    "elastic_cos": HeadEntry(
        ElasticCosFace, m=0.35, s=64.0, sigma=0.05, args={"plus": False, **_ELASTIC, "guard": "none"}
    ),
    "elastic_cos_plus": HeadEntry(
        ElasticCosFace, m=0.35, s=64.0, sigma=0.025, args={"plus": True, **_ELASTIC, "guard": "none"}
    ),
    "li_arcface": HeadEntry(LiArcFace, m=0.45, s=64.0),
    "magface": HeadEntry(
        MagFace,
        s=64.0,
        args={"l_a": 10.0, "u_a": 110.0, "l_m": 0.45, "u_m": 0.8, "lambda_g": 35.0, "guard": "thmm", **_EXACT},
    ),
    "mv_softmax": HeadEntry(MVSoftmax, m=0.35, s=32.0, args={"t": 0.2, "mode": "am", "guard": "thmm", **_EXACT}),
    "normface": HeadEntry(NormFace, s=64.0),
    "softmax": HeadEntry(Softmax),
    "sphereface": HeadEntry(
        SphereFace,
        m=4.0,
        s=64.0,
        args={
            "lambda_base": 1000.0,
            "lambda_gamma": 0.12,
            "lambda_power": 1.0,
            "lambda_min": 5.0,
            "guard": "continuous",
            **_EXACT,
        },
    ),
    "subcenter_arcface": _subcenter(_arc()),
    "subcenter_cosface": _subcenter(_cos()),
    "subcenter_elastic_arc_plus": _subcenter(_elastic_arc_plus()),
}


def head_names() -> list[str]:
    """The registered heads, which are the options of the `head` config group (`subcenter_<name>` also
    wraps any other head)."""
    return sorted(HEADS)


def head_entry(name: str) -> HeadEntry:
    """The registry entry of `head=<name>`, or a ValueError that lists the valid names."""
    if name not in HEADS:
        raise ValueError(f"head={name!r}: unknown; valid names are {head_names()} (or subcenter_<name>)")
    return HEADS[name]


def _build(entry: HeadEntry, overrides: dict[str, Any]) -> MarginHead:
    kwargs = {**entry.kwargs(), **{entry.aliases.get(k, k): v for k, v in overrides.items()}}
    return entry.cls(**kwargs)


def build_head(name: str, **overrides: Any) -> MarginHead:
    """The head `head=<name>` builds, with `overrides` applied to its arguments (m, s, sigma included);
    `subcenter_<name>` without an entry of its own wraps `<name>` (k=3). An m, s or sigma of None means
    the registry's value (the config's top-level keys are null for a head that has none)."""
    overrides = {k: v for k, v in overrides.items() if not (k in ("m", "s", "sigma") and v is None)}
    if name not in HEADS and name.startswith(_SUBCENTER):
        k = overrides.pop("k", _SUBCENTER_K)
        return SubCenter(build_head(name[len(_SUBCENTER) :], **overrides), k=k)
    entry = head_entry(name)
    if entry.base is not None:
        k = overrides.pop("k", entry.args["k"])
        base = HeadEntry(
            entry.base.cls, m=entry.m, s=entry.s, sigma=entry.sigma, args=entry.base.args, aliases=entry.base.aliases
        )
        return SubCenter(_build(base, overrides), k=k)
    return _build(entry, overrides)
