"""Sub-center wrapper (Deng et al. 2020): K centres per class, the closest one speaks for the class.

The centres layer sees ``centers_per_class = K`` and returns ``[B, C*K]`` cosines laid out as
``[C, K]`` (column ``c*K + k``); the wrapper max-pools over K and hands ``[B, C]`` to any base head,
so noisy samples can settle on a non-dominant sub-centre without pulling the main one.

Chunked, the classifier does the pooling (the K columns of each class in a chunk, and the K target
sub-centres of each row) and hands the pooled cosines to the base head's plan.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from .base import MarginHead
from .plan import HeadPlan
from elasticface.utils.errors import BadValue


class SubCenter(MarginHead):
    """Wrap ``base`` with ``k`` sub-centres per class; K = 1 is exactly ``base``."""

    def __init__(self, base: MarginHead, *, k: int) -> None:
        nn.Module.__init__(self)
        if not isinstance(base, MarginHead):
            raise BadValue(f"base={type(base).__name__}: must be a MarginHead")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise BadValue(f"k={k!r}: must be an integer >= 1")
        if isinstance(base, SubCenter):
            raise BadValue("base: a SubCenter cannot wrap another SubCenter")
        self.base = base
        self.k = k
        self.s = base.s
        self.centers_per_class = k
        self.needs_norms = base.needs_norms
        self.normalized = base.normalized
        self.chunked_by_default = base.chunked_by_default  # measured: 0.8x the dense step over an ArcFace base

    @property
    def angular_margin(self) -> float | None:  # type: ignore[override]
        return self.base.angular_margin

    def pool(self, cos: Tensor) -> Tensor:
        """``[B, C*K] -> [B, C]`` by the max over each class's K sub-centres."""
        if cos.shape[-1] % self.k:
            raise BadValue(f"SubCenter(k={self.k}): got {cos.shape[-1]} columns, not a multiple of k")
        if self.k == 1:
            return cos
        return cos.unflatten(-1, (cos.shape[-1] // self.k, self.k)).amax(dim=-1)

    def plan(self, cos_y: Tensor, valid: Tensor, norms: Tensor | None = None, **kwargs: Any) -> HeadPlan:
        """``cos_y``: the max over each row's K target sub-centres (pooled by the caller)."""
        return self.base.plan(cos_y, valid, norms, **kwargs)

    def eval_logits(self, cos: Tensor) -> Tensor:
        return self.base.eval_logits(cos)

    def extra_repr(self) -> str:
        return f"k={self.k}"
