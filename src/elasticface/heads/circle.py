"""Circle loss, classification form (Sun et al. 2020): self-paced weights on every similarity.

With class-level labels: target ``s·α_p·(cos θ_y - (1 - m))`` with ``α_p = [1 + m - cos θ_y]_+``,
non-targets ``s·α_n·(cos θ_j - m)`` with ``α_n = [cos θ_j + m]_+``; the α are detached, as in the
paper. Followed by the usual cross-entropy this is the paper's loss with γ = s. Face defaults:
s = γ = 256, m = 0.25. Eval logits are ``s·cos``.
"""

from __future__ import annotations

from .base import MarginHead, check_range
from .plan import HeadInputs, HeadPlan


class Circle(MarginHead):
    """Circle loss logits with relaxation margin ``m`` and scale ``s`` (= γ)."""

    chunked_by_default = False  # its non-target map runs autograd per chunk: 1.2-1.5x the dense step

    def __init__(self, *, s: float, m: float) -> None:
        super().__init__(s)
        self.m = check_range("m", m, 0.0, 1.0)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        s, m = self.s, self.m
        alpha_p = (1.0 + m - batch.cos_y.detach()).clamp_min(0.0)
        target = alpha_p * (batch.cos_y - (1.0 - m)) * s
        return HeadPlan(target, lambda c: (c.detach() + m).clamp_min(0.0) * (c - m) * s)

    def extra_repr(self) -> str:
        return f"s={self.s}, m={self.m}"
