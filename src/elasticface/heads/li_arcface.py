"""Li-ArcFace / AirFace (Li et al. 2019): logits linear in the angle, ``s·(π - 2(θ + m))/π``.

Every logit becomes ``s·(1 - 2θ_j/π)`` and the target ``s·(1 - 2(θ_y + m)/π)``: the target
stays monotone in θ for any m (no guard needed) and the gradient does not vanish near θ = 0 or π.
This is the one head that needs an acos over the whole [B, C] matrix; the safe acos keeps its
gradient finite at |cos| = 1. Eval logits use the same linear map without margin.
"""

from __future__ import annotations

import math

from torch import Tensor

from .base import MarginHead, check_range
from .functional import safe_acos
from .plan import HeadInputs, HeadPlan


class LiArcFace(MarginHead):
    """Li-ArcFace with additive angular margin ``m`` (paper: m = 0.45, s = 64)."""

    chunked_by_default = False  # its non-target map runs autograd per chunk: 1.2-1.5x the dense step

    def __init__(self, *, s: float, m: float) -> None:
        super().__init__(s)
        self.m = check_range("m", m, 0.0, math.pi / 2, hint=" (radians)")

    def _linear(self, theta: Tensor) -> Tensor:
        return theta.mul(-2.0 * self.s / math.pi).add_(self.s)

    def eval_logits(self, cos: Tensor) -> Tensor:
        return self._linear(safe_acos(cos))

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        return HeadPlan(self._linear(safe_acos(batch.cos_y) + self.m), lambda c: self._linear(safe_acos(c)))

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}"
