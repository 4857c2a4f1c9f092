"""Fixed-margin heads: CosFace, ArcFace, SphereFace and the combined margin, all via one transform.

Defaults (guard / gradient) and why:

- CosFace: no angle is involved (θ ≤ π always), guard is irrelevant; exact gradient.
- ArcFace: ``thmm``, as insightface and pytorch-metric-learning, so the target stays monotone in θ;
  ``exact`` gradient as in the ArcFace paper and the ElasticFace code (insightface's current
  ``straight_through`` is one switch away).
- SphereFace: ``continuous``, the paper's own ψ(θ) = (-1)^k cos(mθ) - 2k, with its λ annealing.
- Combined: ``continuous``, the one guard that is monotone for every (m1, m2, m3); all three margins
  act at once (insightface's torch version supports only m1 = 1 with either m2 or m3).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import GuardedHead, check_range
from .functional import margin_plan, margin_target
from .plan import HeadInputs, HeadPlan


class CosFace(GuardedHead):
    """CosFace / AM-Softmax (Wang et al. 2018): target ``s * (cos θ_y - m)``."""

    def __init__(self, *, s: float, m: float, guard: str, gradient: str) -> None:
        super().__init__(s, guard, gradient)
        self.m = check_range("m", m, 0.0, 2.0)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        return margin_plan(batch.cos_y, self.s, m3=self.m, guard=self.guard, gradient=self.gradient)

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}, guard={self.guard}, gradient={self.gradient}"


class ArcFace(GuardedHead):
    """ArcFace (Deng et al. 2019): target ``s * cos(θ_y + m)``, an additive angular margin."""

    def __init__(self, *, s: float, m: float, guard: str, gradient: str) -> None:
        super().__init__(s, guard, gradient)
        self.m = self.angular_margin = check_range("m", m, 0.0, math.pi / 2, hint=" (radians)")

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        return margin_plan(batch.cos_y, self.s, m2=self.m, guard=self.guard, gradient=self.gradient)

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}, guard={self.guard}, gradient={self.gradient}"


class CombinedMargin(GuardedHead):
    """Combined margin (insightface): target ``s * (cos(m1·θ_y + m2) - m3)``, all three at once."""

    def __init__(self, *, s: float, m1: float, m2: float, m3: float, guard: str, gradient: str) -> None:
        super().__init__(s, guard, gradient)
        self.m1 = check_range("m1", m1, 0.0, 10.0, lo_open=True, hi_open=False)
        self.m2 = self.angular_margin = check_range("m2", m2, 0.0, math.pi / 2, hint=" (radians)")
        self.m3 = check_range("m3", m3, 0.0, 2.0)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        return margin_plan(batch.cos_y, self.s, self.m1, self.m2, self.m3, self.guard, self.gradient)

    def extra_repr(self) -> str:
        return f"s={self.s}, m1={self.m1}, m2={self.m2}, m3={self.m3}, guard={self.guard}, gradient={self.gradient}"


class SphereFace(GuardedHead):
    """SphereFace / A-Softmax (Liu et al. 2017) on normalised features: target ``s * ψ(θ_y)``.

    ``ψ(θ) = (-1)^k cos(mθ) - 2k`` (the ``continuous`` guard). As in the paper, the target is blended
    with plain ``cos θ`` as ``(λ cos θ + ψ) / (1 + λ)`` with
    ``λ = max(lambda_min, lambda_base * (1 + lambda_gamma * it) ** -lambda_power)``; the iteration
    counter ``it`` is a buffer so the annealing resumes from a checkpoint. ``lambda_base = 0``
    disables the blend.
    """

    it: Tensor

    def __init__(
        self,
        *,
        s: float,
        m: float,
        lambda_base: float,
        lambda_gamma: float,
        lambda_power: float,
        lambda_min: float,
        guard: str,
        gradient: str,
    ) -> None:
        super().__init__(s, guard, gradient)
        self.m = check_range("m", m, 1.0, 10.0, hi_open=False)
        self.lambda_base = check_range("lambda_base", lambda_base, 0.0)
        self.lambda_gamma = check_range("lambda_gamma", lambda_gamma, 0.0)
        self.lambda_power = check_range("lambda_power", lambda_power, 0.0)
        self.lambda_min = check_range("lambda_min", lambda_min, 0.0)
        self.register_buffer("it", torch.zeros((), dtype=torch.long))

    def current_lambda(self) -> float:
        if self.lambda_base == 0.0:
            return 0.0
        decayed = self.lambda_base * (1.0 + self.lambda_gamma * float(self.it)) ** (-self.lambda_power)
        return max(self.lambda_min, decayed)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        lam = self.current_lambda()
        if self.training:
            self.it += 1
        if lam == 0.0:
            return margin_plan(batch.cos_y, self.s, m1=self.m, guard=self.guard, gradient=self.gradient)
        cos_y = batch.cos_y
        psi = margin_target(cos_y, m1=self.m, guard=self.guard, gradient=self.gradient)
        s = self.s
        return HeadPlan((lam * cos_y.clamp(-1.0, 1.0) + psi) / (1.0 + lam) * s, lambda c: c * s, s)

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}, lambda_base={self.lambda_base}, guard={self.guard}"
