"""MV-Softmax (Wang et al. 2020): a margin on the target plus extra weight on mis-classified negatives.

A negative with ``cos θ_j`` above the margined target ``f(θ_y)`` becomes ``(t+1)·cos θ_j + t``
(``t`` fixed, paper 0.2), focusing training on the hard negatives ("support vectors").
``mode="am"``: ``f = cos θ_y - m`` (MV-AM-Softmax, default, m = 0.35, s = 32); ``mode="arc"``:
``f = cos(θ_y + m)`` (MV-Arc-Softmax). The mis-classified test uses the unguarded target; the
target itself goes through ``guard`` (default ``thmm``) with exact gradients.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import GuardedHead, check_choice, check_range
from .functional import margin_target
from .plan import HeadInputs, HeadPlan


class MVSoftmax(GuardedHead):
    """MV-AM/Arc-Softmax with margin ``m``, negative weight ``t`` and ``mode`` in {am, arc}."""

    chunked_by_default = False  # its non-target map runs autograd per chunk: 1.2-1.5x the dense step

    def __init__(self, *, s: float, m: float, t: float, mode: str, guard: str, gradient: str) -> None:
        super().__init__(s, guard, gradient)
        self.mode = check_choice("mode", mode, ("am", "arc"))
        self.m = check_range("m", m, 0.0, 2.0 if mode == "am" else math.pi / 2)
        self.t = check_range("t", t, 0.0)

    def _target(self, cos_y: Tensor, guard: str, gradient: str) -> Tensor:
        if self.mode == "am":
            return margin_target(cos_y, m3=self.m, guard=guard, gradient=gradient)
        return margin_target(cos_y, m2=self.m, guard=guard, gradient=gradient)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        target = self._target(batch.cos_y, self.guard, self.gradient) * self.s
        with torch.no_grad():
            threshold = self._target(batch.cos_y.detach(), "none", "exact")
            threshold = torch.where(batch.valid, threshold, torch.full_like(threshold, float("inf")))[:, None]
        t, s = self.t, self.s

        def nontarget(cos: Tensor) -> Tensor:
            return torch.where(cos > threshold, cos * (t + 1.0) + t, cos) * s

        return HeadPlan(target, nontarget)

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}, t={self.t}, mode={self.mode}, guard={self.guard}"
