"""Heads without a margin: plain softmax over raw inner products, and NormFace's scaled cosine."""

from __future__ import annotations

from torch import Tensor

from .base import MarginHead
from .plan import HeadInputs, HeadPlan


class Softmax(MarginHead):
    """Plain linear classifier: the centres layer gives raw ``W·x`` (``normalized = False``).

    The baseline every margin paper compares against; logits pass through unchanged.
    """

    normalized = False

    def __init__(self) -> None:
        super().__init__(None)

    def eval_logits(self, cos: Tensor) -> Tensor:
        return cos

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        return HeadPlan(batch.cos_y, lambda c: c, 1.0)


class NormFace(MarginHead):
    """NormFace (Wang et al. 2017): ``s * cos θ`` for every class, no margin.

    Isolates what normalisation alone buys, before any margin is added.
    """

    def __init__(self, *, s: float) -> None:
        super().__init__(s)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        s = self.s
        return HeadPlan(batch.cos_y * s, lambda c: c * s, s)
