"""Margin heads: what each changes of a face classifier's logits, with no class weights.

Every head subclasses :class:`MarginHead` and states its rule once, as a plan (plan.py): the target
logit of rows with a label >= 0 (curriculum / mis-classified-vector / circle heads also map the
negatives), in fp32 (float64 stays float64) even under autocast. ``build_head(name, **kwargs)``
builds one by name from the registry (registry.py), the one home of every head's defaults, which
``configs/head/<name>.yaml`` reads. The user-facing table: docs/heads.md.

=================  ===============================================  ============  ========
name               target logit                                      guard         gradient
=================  ===============================================  ============  ========
softmax            raw ``W·x`` (``normalized = False``)             -             -
normface           ``s·cos θ``                                       -             -
cosface            ``s·(cos θ - m)``                                 none (n/a)    exact
arcface            ``s·cos(θ + m)``                                  thmm          exact
sphereface         ``s·(λ cos θ + ψ(θ))/(1 + λ)``, ψ with m1 = m      continuous    exact
combined           ``s·(cos(m1 θ + m2) - m3)``                       continuous    exact
elastic_arc(_plus) ``s·cos(θ + m_i)``, m_i ~ N(m, σ)                 thmm          exact
elastic_cos(_plus) ``s·(cos θ - m_i)``                               none (n/a)    exact
adacos             ``s_t·cos θ`` (fixed or dynamic s)                -             -
curricularface     ``s·cos(θ + m)``, hard negatives ``cos(t + cos)``  thmm          exact
magface            ``s·cos(θ + m(‖x‖))`` + g-regulariser             thmm          exact
adaface            ``s·(cos(θ - m ẑ) - m - m ẑ)``                    clip          exact
li_arcface         ``s·(π - 2(θ + m))/π``                           - (linear)    exact
mv_softmax         AM/Arc target, hard negatives ``(t+1)cos + t``    thmm          exact
circle             ``s·α_p(cos θ - 1 + m)``, ``s·α_n(cos θ_j - m)``  -             -
subcenter_<name>   any of the above on max-over-K sub-centre cosines
=================  ===============================================  ============  ========

Why these defaults: ``thmm`` is what insightface and pytorch-metric-learning ship for additive
angular margins and keeps the target monotone in θ; the Elastic heads share ArcFace's so that
σ = 0 reduces to it exactly (the released ElasticFace code used ``none``). ``continuous`` is
SphereFace's own ψ and the only guard monotone for every m1. ``clip`` is AdaFace's. ``exact``
gradients are what the ArcFace, ElasticFace, MagFace and AdaFace papers' code backpropagate;
``straight_through`` (current insightface) is a constructor switch away.
"""

from __future__ import annotations

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
from .plan import HeadInputs, HeadPlan
from .softmax import NormFace, Softmax
from .subcenter import SubCenter

from .registry import build_head, head_names

__all__ = [
    "AdaCos",
    "AdaFace",
    "ArcFace",
    "Circle",
    "CombinedMargin",
    "CosFace",
    "CurricularFace",
    "ElasticArcFace",
    "ElasticCosFace",
    "HeadInputs",
    "HeadPlan",
    "LiArcFace",
    "MVSoftmax",
    "MagFace",
    "MarginHead",
    "NormFace",
    "Softmax",
    "SphereFace",
    "SubCenter",
    "build_head",
    "head_names",
]
