"""MagFace (Meng et al. 2021): the angular margin grows with the feature norm, plus a norm regulariser.

``a = clamp(‖x‖, l_a, u_a)``, ``m(a) = l_m + (u_m - l_m)(a - l_a)/(u_a - l_a)``, target
``s·cos(θ_y + m(a))``, and ``aux_loss = λ_g · mean(a/u_a² + 1/a)`` (the g-regulariser), which the
training step adds to the cross-entropy. The margin stays differentiable through ``‖x‖``, so the
norm learns to encode quality; this needs ``gradient="exact"`` (the default). Guard ``thmm`` as in
the MagFace code. Paper defaults: l_a = 10, u_a = 110, l_m = 0.45, u_m = 0.8, λ_g = 35, s = 64.
"""

from __future__ import annotations

import math

from torch import Tensor

from .base import GuardedHead, check_range
from .functional import margin_plan
from .plan import HeadInputs, HeadPlan


class MagFace(GuardedHead):
    """MagFace head; pass the embedding norms (``needs_norms = True``)."""

    needs_norms = True

    def __init__(
        self,
        *,
        s: float,
        l_a: float,
        u_a: float,
        l_m: float,
        u_m: float,
        lambda_g: float,
        guard: str,
        gradient: str,
    ) -> None:
        super().__init__(s, guard, gradient)
        self.l_a = check_range("l_a", l_a, 0.0, None, lo_open=True)
        self.u_a = check_range("u_a", u_a, self.l_a, None, lo_open=True, hint=" (u_a > l_a)")
        self.l_m = check_range("l_m", l_m, 0.0, math.pi / 2, hint=" (radians)")
        self.u_m = check_range("u_m", u_m, self.l_m, math.pi / 2, hint=" (l_m <= u_m, radians)")
        self.lambda_g = check_range("lambda_g", lambda_g, 0.0)

    def margin_of(self, a: Tensor) -> Tensor:
        return (self.u_m - self.l_m) / (self.u_a - self.l_a) * (a - self.l_a) + self.l_m

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        assert batch.norms is not None
        a = batch.norms.clamp(self.l_a, self.u_a)
        margins = self.margin_of(a)
        g = a / self.u_a**2 + 1.0 / a
        plan = margin_plan(batch.cos_y, self.s, m2=margins, guard=self.guard, gradient=self.gradient, margins=margins)
        plan.aux_loss = self.lambda_g * (g * batch.valid).sum() / batch.valid.sum().clamp_min(1)
        return plan

    def extra_repr(self) -> str:
        return (
            f"s={self.s}, l_a={self.l_a}, u_a={self.u_a}, l_m={self.l_m}, u_m={self.u_m}, "
            f"lambda_g={self.lambda_g}, guard={self.guard}, gradient={self.gradient}"
        )
