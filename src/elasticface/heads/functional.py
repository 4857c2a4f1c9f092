"""The one target transform behind most heads: ``s * (cos(m1*θ_y + m2) - m3)`` on target logits only.

Everything here is O(B): a function of each row's ``cos θ_y``. No [B, C] margin or one-hot tensor is ever built.

Guards (what happens when ``φ = m1*θ + m2`` leaves [0, π], where ``cos φ`` stops decreasing in θ):

- ``none``: plain ``cos φ - m3`` (the released ElasticFace code; not monotone past π).
- ``easy``: insightface's ``easy_margin``: the margin only where ``cos θ > 0``, else ``cos θ``.
- ``thmm``: insightface / pytorch-metric-learning: past ``φ > π`` use ``cos θ - m3 - m2·sin(m2)``
  (monotone for m1 = 1, m2 in [0, π/2)).
- ``clip``: ``cos(clamp(φ, 0, π)) - m3`` (AdaFace's clip; flat, zero gradient, outside [0, π]).
- ``continuous``: SphereFace's monotone extension ``(-1)^k cos φ - 2k - m3``, ``k = floor(φ/π)``;
  continuous and strictly decreasing in θ for every m1 > 0.

Gradients: ``exact`` backpropagates through the margin (ArcFace paper, ElasticFace, MagFace, AdaFace
code); ``straight_through`` keeps the margin's value but the gradient of plain ``cos θ`` (current
insightface arcface_torch, which edits the logits under ``no_grad``).
"""

from __future__ import annotations

import math
from typing import Literal, Union

import torch
from torch import Tensor

from elasticface.heads.plan import HeadPlan
from elasticface.utils.errors import BadValue

Guard = Literal["none", "easy", "thmm", "clip", "continuous"]
Gradient = Literal["exact", "straight_through"]
GUARDS: tuple[str, ...] = ("none", "easy", "thmm", "clip", "continuous")
GRADIENTS: tuple[str, ...] = ("exact", "straight_through")
Scalar = Union[float, Tensor]

# Floor for 1 - cos^2 in the acos derivative: caps |d acos / d cos| at 1e3 so the gradient stays
# finite when an embedding sits exactly on its class centre (cos = 1) or its opposite (cos = -1).
_ONE_MINUS_COS2_MIN = 1e-6


class _SafeAcos(torch.autograd.Function):
    """acos with an exact value and a finite derivative at |x| = 1 (saves only its input)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.acos(x.clamp(-1.0, 1.0))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        xc = x.clamp(-1.0, 1.0)
        denom = ((1.0 - xc) * (1.0 + xc)).clamp_min(_ONE_MINUS_COS2_MIN).rsqrt()
        return -grad * denom


def safe_acos(x: Tensor) -> Tensor:
    """``acos(clamp(x, -1, 1))`` whose gradient is finite everywhere, including x = ±1."""
    return _SafeAcos.apply(x)


def margin_target(
    cos_y: Tensor,
    m1: Scalar = 1.0,
    m2: Scalar = 0.0,
    m3: Scalar = 0.0,
    guard: str = "none",
    gradient: str = "exact",
) -> Tensor:
    """Unscaled target value ``cos(m1*θ + m2) - m3`` for a vector of target cosines, with a guard.

    ``m1``, ``m2``, ``m3`` are floats or tensors shaped like ``cos_y`` (per-sample margins). Both
    branches of every ``torch.where`` are finite, so no NaN leaks into the gradient.
    """
    c = cos_y.clamp(-1.0, 1.0)
    if isinstance(m1, (int, float)) and m1 == 1.0 and isinstance(m2, (int, float)) and m2 == 0.0:
        target = c - m3  # CosFace-type: no angle needed, exact for every guard (φ = θ in [0, π])
    else:
        theta = safe_acos(c)
        phi = theta * m1 + m2 if not (isinstance(m1, (int, float)) and m1 == 1.0) else theta + m2
        if guard == "none":
            target = torch.cos(phi) - m3
        elif guard == "easy":
            target = torch.where(c > 0, torch.cos(phi) - m3, c)
        elif guard == "thmm":
            mm = m2 * torch.sin(m2) if isinstance(m2, Tensor) else m2 * math.sin(m2)
            target = torch.where(phi.detach() <= math.pi, torch.cos(phi) - m3, c - m3 - mm)
        elif guard == "clip":
            target = torch.cos(phi.clamp(0.0, math.pi)) - m3
        elif guard == "continuous":
            k = torch.floor(phi.detach() / math.pi)
            sign = 1.0 - 2.0 * torch.remainder(k, 2.0)
            target = sign * torch.cos(phi) - 2.0 * k - m3
        else:
            raise BadValue(f"guard={guard!r}: must be one of {GUARDS}")
    if gradient == "straight_through":
        return c + (target - c).detach()
    if gradient != "exact":
        raise BadValue(f"gradient={gradient!r}: must be one of {GRADIENTS}")
    return target


def margin_plan(
    cos_y: Tensor,
    s: float,
    m1: Scalar = 1.0,
    m2: Scalar = 0.0,
    m3: Scalar = 0.0,
    guard: str = "none",
    gradient: str = "exact",
    *,
    margins: Tensor | None = None,
) -> HeadPlan:
    """The plan of a margin on the target only: ``s · margin_target(cos θ_y)``, ``s·cos`` elsewhere."""
    return HeadPlan(margin_target(cos_y, m1, m2, m3, guard, gradient) * s, lambda c: c * s, s, margins=margins)
