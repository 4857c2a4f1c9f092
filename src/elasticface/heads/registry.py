"""Heads by name, each entry carrying its paper's defaults (timm's `@register_model` idea): the one home of
those values, and the one list of the `head=<name>` options. `build_head` builds from it; the commands turn each
entry into an option of the `head` config group (cli/head_group.py) whose top-level m, s, sigma read the entry
(`${head_default:...}`), and docs/heads.md's table is generated from it (heads/table.py).

Readable without torch: an entry names its class as `"module:Class"` (relative to this package or absolute),
imported on first build, so that `python train.py --help` and `--cfg job` list the heads without importing it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from elasticface.utils.errors import BadValue

if TYPE_CHECKING:
    from .base import MarginHead

_SUBCENTER = "subcenter_"
SUBCENTER_K = 3  # sub-centres per class, Deng et al. 2020's choice; also for `subcenter_<name>` without an entry
#: the top-level config keys of a head (sweeps read `m=... s=... sigma=...`)
TOP_LEVEL = ("m", "s", "sigma")


@dataclass(frozen=True)
class HeadEntry:
    """One `head=<name>` option: where its class is (`"module:Class"`), what its target logit is (`about`, the
    head table's formula), its top-level `m`, `s`, `sigma` (None where the head has none) and every other argument
    its config passes, with the paper's values; `base` for a sub-center wrapper."""

    cls: str
    about: str = ""
    m: float | None = None
    s: float | None = None
    sigma: float | None = None
    args: dict[str, Any] = field(default_factory=dict)
    base: HeadEntry | None = None
    # the constructor argument a top-level key feeds when its name differs (combined: m is m2)
    aliases: dict[str, str] = field(default_factory=dict)

    def load(self) -> type[MarginHead]:
        """The head class, imported on first use (`".margin:ArcFace"` from this package)."""
        module, _, name = self.cls.partition(":")
        if not module or not name:
            raise BadValue(f"HeadEntry.cls={self.cls!r}: expected 'module:Class', e.g. '.margin:ArcFace'")
        return getattr(importlib.import_module(module, __package__), name)

    def top_level(self) -> dict[str, float]:
        """The top-level keys the head has (m, s, sigma that are not None), with their defaults."""
        return {k: getattr(self, k) for k in TOP_LEVEL if getattr(self, k) is not None}

    def kwargs(self) -> dict[str, Any]:
        """The constructor's arguments: `args` plus the top-level m, s, sigma the head takes."""
        return {**{self.aliases.get(k, k): v for k, v in self.top_level().items()}, **self.args}


_EXACT = {"gradient": "exact"}
_ELASTIC = {"plus_assignment": "paper", "rank_scope": "local", "truncate": None, "seed": None, **_EXACT}
_PLUS = "as `{}`, the largest m_i to the smallest cos θ_y"


def _arc() -> HeadEntry:
    return HeadEntry(".margin:ArcFace", "`s·cos(θ_y + m)`", m=0.5, s=64.0, args={"guard": "thmm", **_EXACT})


def _cos() -> HeadEntry:
    return HeadEntry(".margin:CosFace", "`s·(cos θ_y - m)`", m=0.35, s=64.0, args={"guard": "none", **_EXACT})


def _elastic_arc_plus() -> HeadEntry:
    return HeadEntry(
        ".elastic:ElasticArcFace", _PLUS.format("elastic_arc"), m=0.5, s=64.0, sigma=0.0175,
        args={"plus": True, **_ELASTIC, "guard": "thmm"},
    )


def _subcenter(base_name: str, base: HeadEntry) -> HeadEntry:
    """`base` with K sub-centres per class; its m, s, sigma are the wrapper's top-level ones."""
    return HeadEntry(
        ".subcenter:SubCenter", f"`{base_name}` on the max over K sub-centres per class",
        m=base.m, s=base.s, sigma=base.sigma, args={"k": SUBCENTER_K}, base=base,
    )


HEADS: dict[str, HeadEntry] = {
    "softmax": HeadEntry(".softmax:Softmax", "raw `W·x` (unchanged)"),
    "normface": HeadEntry(".softmax:NormFace", "`s·cos θ_y`", s=64.0),
    "cosface": _cos(),
    "arcface": _arc(),
    "sphereface": HeadEntry(
        ".margin:SphereFace",
        "`s·(λ cos θ_y + ψ(θ_y))/(1 + λ)`, ψ with m1 = m",
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
    "combined": HeadEntry(
        ".margin:CombinedMargin",
        "`s·(cos(m1 θ_y + m) - m3)`",
        m=0.3,
        s=64.0,
        args={"m1": 1.0, "m3": 0.2, "guard": "continuous", **_EXACT},
        aliases={"m": "m2"},
    ),
    "elastic_arc": HeadEntry(
        ".elastic:ElasticArcFace", "`s·cos(θ_y + m_i)`, m_i ~ N(m, σ)", m=0.5, s=64.0, sigma=0.05,
        args={"plus": False, **_ELASTIC, "guard": "thmm"},
    ),
    "elastic_arc_plus": _elastic_arc_plus(),
    "elastic_cos": HeadEntry(
        ".elastic:ElasticCosFace", "`s·(cos θ_y - m_i)`, m_i ~ N(m, σ)", m=0.35, s=64.0, sigma=0.05,
        args={"plus": False, **_ELASTIC, "guard": "none"},
    ),
    "elastic_cos_plus": HeadEntry(
        ".elastic:ElasticCosFace", _PLUS.format("elastic_cos"), m=0.35, s=64.0, sigma=0.025,
        args={"plus": True, **_ELASTIC, "guard": "none"},
    ),
    "adacos": HeadEntry(
        ".adacos:AdaCos", "`s_t·cos θ_y`, s_t set from the batch each step", args={"num_classes": None, "dynamic": True}
    ),
    "adacos_fixed": HeadEntry(
        ".adacos:AdaCos", "`√2·log(C-1)·cos θ_y`", args={"num_classes": None, "dynamic": False}
    ),
    "curricularface": HeadEntry(
        ".curricularface:CurricularFace", "`s·cos(θ_y + m)` (hard negatives `s·cos θ_j (t + cos θ_j)`)",
        m=0.5, s=64.0, args={"momentum": 0.01, "guard": "thmm", **_EXACT},
    ),
    "magface": HeadEntry(
        ".magface:MagFace",
        "`s·cos(θ_y + m(‖x‖))` + norm regulariser",
        s=64.0,
        args={"l_a": 10.0, "u_a": 110.0, "l_m": 0.45, "u_m": 0.8, "lambda_g": 35.0, "guard": "thmm", **_EXACT},
    ),
    "adaface": HeadEntry(
        ".adaface:AdaFace", "`s·(cos(θ_y - m ẑ) - m - m ẑ)`, ẑ from the norm", m=0.4, s=64.0,
        args={"h": 0.333, "t_alpha": 0.01, "eps": 0.001, "guard": "clip", **_EXACT},
    ),
    "li_arcface": HeadEntry(
        ".li_arcface:LiArcFace", "`s·(π - 2(θ_y + m))/π` (all classes linear in θ)", m=0.45, s=64.0
    ),
    "mv_softmax": HeadEntry(
        ".mv_softmax:MVSoftmax", "`s·(cos θ_y - m)` (hard negatives `s·((t+1) cos θ_j + t)`)", m=0.35, s=32.0,
        args={"t": 0.2, "mode": "am", "guard": "thmm", **_EXACT},
    ),
    "circle": HeadEntry(".circle:Circle", "`s·α_p(cos θ_y - 1 + m)` (all `s·α_n(cos θ_j - m)`)", m=0.25, s=256.0),
    "subcenter_arcface": _subcenter("arcface", _arc()),
    "subcenter_cosface": _subcenter("cosface", _cos()),
    "subcenter_elastic_arc_plus": _subcenter("elastic_arc_plus", _elastic_arc_plus()),
}


def head_names() -> list[str]:
    """The registered heads, which are the options of the `head` config group (`subcenter_<name>` also
    wraps any other head)."""
    return sorted(HEADS)


def head_entry(name: str) -> HeadEntry:
    """The registry entry of `head=<name>`, or a ValueError that lists the valid names."""
    if name not in HEADS:
        raise BadValue(f"head={name!r}: unknown; valid names are {head_names()} (or subcenter_<name>)")
    return HEADS[name]


def _build(entry: HeadEntry, overrides: dict[str, Any]) -> MarginHead:
    kwargs = {**entry.kwargs(), **{entry.aliases.get(k, k): v for k, v in overrides.items()}}
    return entry.load()(**kwargs)


def build_head(name: str, **overrides: Any) -> MarginHead:
    """The head `head=<name>` builds, with `overrides` applied to its arguments (m, s, sigma included);
    `subcenter_<name>` without an entry of its own wraps `<name>` (k=3). An m, s or sigma of None means
    the registry's value (the config's top-level keys are null for a head that has none)."""
    from .subcenter import SubCenter

    overrides = {k: v for k, v in overrides.items() if not (k in TOP_LEVEL and v is None)}
    if name not in HEADS and name.startswith(_SUBCENTER):
        k = overrides.pop("k", SUBCENTER_K)
        return SubCenter(build_head(name[len(_SUBCENTER) :], **overrides), k=k)
    entry = head_entry(name)
    if entry.base is not None:
        k = overrides.pop("k", entry.args["k"])
        base = HeadEntry(
            entry.base.cls, m=entry.m, s=entry.s, sigma=entry.sigma, args=entry.base.args, aliases=entry.base.aliases
        )
        return SubCenter(_build(base, overrides), k=k)
    return _build(entry, overrides)
