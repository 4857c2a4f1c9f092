"""AdaFace (Kim et al. 2022): the margin adapts to image quality, proxied by the feature norm.

``ẑ = clip(h·(‖x‖ - μ)/(σ + eps), -1, 1)`` with EMA batch statistics μ, σ (buffers ``batch_mean``,
``batch_std``, momentum ``t_alpha``); target ``s·(cos(θ_y - m·ẑ) - (m + m·ẑ))``: high-norm
(good-quality) samples get an ArcFace-like margin, low-norm ones a CosFace-like one.
Norms are detached, as in the AdaFace code. Default guard ``clip`` (the code clips θ + g_angle to
[eps, π - eps]; here to [0, π], as the safe acos no longer needs the eps) and exact gradient.
The plan's ``margins`` are the angular part ``-m·ẑ``. With h = 0 the head is CosFace.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import GuardedHead, check_range
from .functional import margin_plan
from .plan import HeadInputs, HeadPlan


class AdaFace(GuardedHead):
    """AdaFace head; pass the embedding norms (``needs_norms = True``). Paper: m = 0.4, h = 0.333."""

    needs_norms = True
    batch_mean: Tensor
    batch_std: Tensor

    def __init__(self, *, s: float, m: float, h: float, t_alpha: float, eps: float, guard: str, gradient: str) -> None:
        super().__init__(s, guard, gradient)
        self.m = check_range("m", m, 0.0, 1.0)
        self.h = check_range("h", h, 0.0)
        self.t_alpha = check_range("t_alpha", t_alpha, 0.0, 1.0, hi_open=False)
        self.eps = check_range("eps", eps, 0.0, None, lo_open=True)
        self.register_buffer("batch_mean", torch.full((), 20.0))
        self.register_buffer("batch_std", torch.full((), 100.0))

    def norm_margins(self, norms: Tensor) -> tuple[Tensor, Tensor]:
        """(angular, additive) margins from the norms; updates the EMA statistics in training."""
        safe = norms.detach().clamp(0.001, 100.0)
        if self.training and safe.numel() > 1:
            with torch.no_grad():
                a = self.t_alpha
                self.batch_mean.copy_(a * safe.mean() + (1 - a) * self.batch_mean.to(safe.dtype))
                self.batch_std.copy_(a * safe.std() + (1 - a) * self.batch_std.to(safe.dtype))
        mean, std = self.batch_mean.to(safe.dtype), self.batch_std.to(safe.dtype)
        z = ((safe - mean) / (std + self.eps) * self.h).clamp(-1.0, 1.0)
        g_angle = -self.m * z
        return g_angle, self.m + self.m * z

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        assert batch.norms is not None
        g_angle, g_add = self.norm_margins(batch.norms)
        return margin_plan(
            batch.cos_y, self.s, m2=g_angle, m3=g_add, guard=self.guard, gradient=self.gradient, margins=g_angle
        )

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}, h={self.h}, t_alpha={self.t_alpha}, guard={self.guard}"
