"""The head contract: a head is one method, :meth:`MarginHead.train_plan`.

Given a batch's ``B``-sized inputs (:class:`~elasticface.heads.plan.HeadInputs`) it returns a
:class:`~elasticface.heads.plan.HeadPlan`: the target logits ``z_y [B]``, an elementwise map of
non-target cosines to logits (per-row parameters B-sized and detached), the scale where that map is
linear, an auxiliary loss and the per-sample margins. The dense ``[B, C]`` logits (the oracle) and
the chunked cross-entropy of :mod:`elasticface.classifier` are both built from the plan.

Heads hold no class weights, so any head works with any centres layer. The base class upcasts to
fp32 with autocast disabled (float64 stays float64, for oracles and gradcheck) and routes eval calls
(``labels is None``) to :meth:`eval_logits`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .dense import dense_logits
from .functional import GRADIENTS, GUARDS
from .plan import HeadInputs, HeadPlan, NonTargetLSE
from .shard import ClassShard
from elasticface.utils.errors import BadValue


def check_range(
    name: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = True,
    hint: str = "",
) -> float:
    """Raise ``ValueError("name=value: must be ...")`` unless ``value`` lies in the given range."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue(f"{name}={value!r}: must be a number")
    ok = math.isfinite(value)
    if lo is not None:
        ok = ok and (value > lo if lo_open else value >= lo)
    if hi is not None:
        ok = ok and (value < hi if hi_open else value <= hi)
    if not ok:
        if hi is None:
            want = f"{'>' if lo_open else '>='} {lo:g}"
        elif lo is None:
            want = f"{'<' if hi_open else '<='} {hi:g}"
        else:
            want = f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise BadValue(f"{name}={value}: must be {want}{hint}")
    return float(value)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise BadValue(f"{name}={value!r}: must be one of {list(choices)}")
    return value


class MarginHead(nn.Module):
    """Base class of every margin head: a head implements :meth:`train_plan` and nothing else of training.

    :meth:`plan` runs it in fp32 (float64 stays float64) with autocast off; :meth:`logits` builds the dense
    ``[B, C]`` logits from the same plan (:func:`elasticface.heads.dense.dense_logits`). Eval calls
    (``head(cos)``) go to :meth:`eval_logits`. Nothing is stored on the head during a step: margins and
    auxiliary losses travel in the returned :class:`HeadPlan`.
    """

    needs_norms: bool = False
    normalized: bool = True
    centers_per_class: int = 1
    #: whether ``model.classifier.path=auto`` takes the chunked form once the classes fill more than one chunk:
    #: True where the chunked step met the time goal (<= 1.05x the dense step), i.e. the fast path (non-target
    #: logits ``s * cos``); heads whose chunked form runs autograd per chunk or a second pass are dense by
    #: default and chunked on request (``path=chunked``, for the memory). Measured: docs/heads.md.
    chunked_by_default: bool = True
    #: the additive angular margin m of ``cos(θ_y + m)`` (ArcFace, ElasticFace-Arc's mean, the combined head's m2),
    #: for the training log's share of rows with θ_y + m > π; None where the margin is not an added angle
    angular_margin: float | None = None

    def __init__(self, s: float | None = None) -> None:
        super().__init__()
        self.s = check_range("s", s, 0.0, None, lo_open=True) if s is not None else None

    def forward(self, cos: Tensor, labels: Tensor | None = None, norms: Tensor | None = None) -> Tensor:
        """Eval (no labels): :meth:`eval_logits`; training: the dense logits of :meth:`logits`."""
        if labels is not None:
            return self.logits(cos, labels, norms)[0]
        with torch.autocast(device_type=cos.device.type, enabled=False):
            return self.eval_logits(self.pool(cos if cos.dtype == torch.float64 else cos.float()))

    def logits(
        self, cos: Tensor, labels: Tensor, norms: Tensor | None = None, **kwargs: Any
    ) -> tuple[Tensor, HeadPlan]:
        """``(logits [B, C], plan)`` of a training batch: the plan applied to every column (see dense.py)."""
        return dense_logits(self, cos, labels, norms, **kwargs)

    def pool(self, cos: Tensor) -> Tensor:
        """``[B, C·K] -> [B, C]``: one cosine per class (the identity unless the head has sub-centres)."""
        return cos

    def eval_logits(self, cos: Tensor) -> Tensor:
        return cos * self.s

    def plan(
        self,
        cos_y: Tensor,
        valid: Tensor,
        norms: Tensor | None = None,
        *,
        num_columns: int,
        nontarget_lse: NonTargetLSE | None = None,
        shard: ClassShard | None = None,
        margin_weight: float = 1.0,
    ) -> HeadPlan:
        """The head on one training batch (see :class:`HeadInputs`), in fp32 with autocast off.

        ``margin_weight`` λ < 1 (a margin schedule's warm-up) moves the target logit toward the margin-free
        ``s·cos θ_y``: ``λ·z_y + (1 - λ)·s·cos θ_y``, for every head alike (for CosFace exactly a margin of
        λ·m); λ = 0 is normalised softmax on the same centres. Heads without a scale (plain softmax) have no margin.
        """
        with torch.autocast(device_type=cos_y.device.type, enabled=False):
            if cos_y.dtype != torch.float64:
                cos_y = cos_y.float()
            if norms is not None:
                norms = norms.to(cos_y.dtype).reshape(-1)
            elif self.needs_norms:
                raise BadValue(f"{type(self).__name__} needs the embedding norms: pass norms=[B]")
            plan = self.train_plan(HeadInputs(cos_y, valid, norms, num_columns, nontarget_lse, shard))
            if plan.margins is not None:
                plan.margins = plan.margins.detach()
            scale = plan.scale if plan.scale is not None else self.s
            if margin_weight < 1.0 and self.normalized and scale is not None:
                free = cos_y.clamp(-1.0, 1.0) * scale
                plan.target = margin_weight * plan.target + (1.0 - margin_weight) * free
            return plan

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        """What this head changes on a training batch: its one rule, for the dense and the chunked path."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"s={self.s}" if self.s is not None else ""


class GuardedHead(MarginHead):
    """A head whose margin goes through :func:`margin_target`: validates ``guard`` and ``gradient``."""

    def __init__(self, s: float, guard: str, gradient: str) -> None:
        super().__init__(s)
        self.guard = check_choice("guard", guard, GUARDS)
        self.gradient = check_choice("gradient", gradient, GRADIENTS)
