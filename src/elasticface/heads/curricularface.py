"""CurricularFace (Huang et al. 2020): ArcFace target plus a curriculum on hard negatives.

A negative with ``cos θ_j > cos(θ_y + m)`` becomes ``cos θ_j · (t + cos θ_j)``, where ``t`` is an EMA
(momentum 0.01) of the batch's mean ``cos θ_y``: easy samples dominate early (t ≈ 0), hard ones
later. ``t`` is a buffer. Default guard ``thmm`` and exact gradient, as in the paper's code.
Rows with label -1 get neither the margin nor the curriculum. With the class centres sharded across
ranks, the thresholds and ``t`` come from every row's ``cos θ_y`` (read from the rank owning its class).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import GuardedHead, check_range
from .functional import margin_target
from .plan import HeadInputs, HeadPlan


class CurricularFace(GuardedHead):
    """CurricularFace with margin ``m`` and EMA ``momentum`` for the curriculum parameter ``t``."""

    chunked_by_default = False  # its non-target map runs autograd per chunk: 1.2-1.5x the dense step

    t: Tensor

    def __init__(self, *, s: float, m: float, momentum: float, guard: str, gradient: str) -> None:
        super().__init__(s, guard, gradient)
        self.m = check_range("m", m, 0.0, math.pi / 2, hint=" (radians)")
        self.momentum = check_range("momentum", momentum, 0.0, 1.0, hi_open=False)
        self.register_buffer("t", torch.zeros(()))

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        cos_y, valid = batch.cos_y, batch.valid
        target = margin_target(cos_y, m2=self.m, guard=self.guard, gradient=self.gradient) * self.s
        with torch.no_grad():
            c = cos_y.detach()
            threshold = margin_target(c, m2=self.m, guard="none")
            threshold = torch.where(valid, threshold, torch.full_like(threshold, float("inf")))[:, None]
            if self.training:
                n = valid.sum()
                mean = torch.where(valid, c, torch.zeros_like(c)).sum() / n.clamp_min(1)
                new_t = self.momentum * mean + (1.0 - self.momentum) * self.t.to(c.dtype)
                self.t.copy_(torch.where(n > 0, new_t, self.t.to(c.dtype)).to(self.t.dtype))
        t, s = self.t.to(c.dtype).clone(), self.s

        def nontarget(cos: Tensor) -> Tensor:
            return torch.where(cos > threshold, cos * (t + cos), cos) * s

        return HeadPlan(target, nontarget)

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}, momentum={self.momentum}, guard={self.guard}, gradient={self.gradient}"
