"""What a head does to one training batch in O(B) memory: the plan the chunked classifier follows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor


@dataclass
class HeadPlan:
    """What a head does to one training batch, in O(B) memory.

    ``target``: the target logits ``z_y [B]`` (differentiable in ``cos θ_y`` and the norms).
    ``nontarget``: elementwise map of a block of non-target cosines ``[B, n]`` to logits; its
    per-row parameters are detached ``[B]`` tensors captured by the closure.
    ``scale``: set when ``nontarget(c) == scale * c`` (a positive number or detached 0-d tensor): the
    classifier then folds it into the embeddings (its fast path).
    """

    target: Tensor
    nontarget: Callable[[Tensor], Tensor]
    scale: float | Tensor | None = None


#: ``nontarget_lse(fn, scale) -> [B]``: detached log-sum-exp of ``fn(cos)`` over each row's non-target
#: columns (one extra pass over the classes, for heads whose batch statistic needs it: AdaCos)
NonTargetLSE = Callable[..., Tensor]
