"""The head contract's two records: what a head is given for one training batch, and what it returns.

A head sees only ``B``-sized quantities (each row's target cosine, valid rows, norms) plus the number
of class columns, a way to ask for the non-target log-sum-exp and the shard of a model-parallel class
dimension. It returns a :class:`HeadPlan`; the dense ``[B, C]`` logits and the chunked cross-entropy
are both built from that plan by the caller, so each head states its rule once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from elasticface.heads.shard import ClassShard

#: ``nontarget_lse(fn, scale) -> [B]``: detached log-sum-exp of ``fn(cos)`` over each row's non-target
#: columns (one extra pass over the classes, for heads whose batch statistic needs it: AdaCos)
NonTargetLSE = Callable[..., Tensor]


@dataclass(frozen=True)
class HeadInputs:
    """One training batch as a head sees it (every tensor ``[B]``; B = the global batch when sharded).

    ``cos_y``: each row's target cosine (the closest sub-centre); differentiable, and any head's target
    logit must be an elementwise function of it (the callers link the gradient per row).
    ``valid``: rows with a label (on some rank). ``norms``: embedding norms, for heads with ``needs_norms``.
    ``num_columns``: the class columns of the dense call (all shards, sampled).
    ``nontarget_lse``: see :data:`NonTargetLSE`. ``shard``: set when the class centres are split across ranks.
    """

    cos_y: Tensor
    valid: Tensor
    norms: Tensor | None
    num_columns: int
    nontarget_lse: NonTargetLSE | None = None
    shard: ClassShard | None = None


@dataclass
class HeadPlan:
    """What a head does to one training batch, in O(B) memory.

    ``target``: the target logits ``z_y [B]`` (differentiable in ``cos θ_y`` and the norms).
    ``nontarget``: elementwise map of a block of non-target cosines ``[B, n]`` to logits; its
    per-row parameters are detached ``[B]`` tensors captured by the closure.
    ``scale``: set when ``nontarget(c) == scale * c`` (a positive number or detached 0-d tensor): the
    callers then take their fast path (the scale folded into the embeddings or the cosines).
    ``aux_loss``: a term the training step adds to the cross-entropy (MagFace's regulariser).
    ``margins``: the detached per-sample margins drawn or computed this step (Elastic*, MagFace, AdaFace).
    """

    target: Tensor
    nontarget: Callable[[Tensor], Tensor]
    scale: float | Tensor | None = None
    aux_loss: Tensor | None = None
    margins: Tensor | None = None
