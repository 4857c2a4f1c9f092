"""The dense margin softmax loss: class centres -> cosines [B, C] -> the head's plan as logits [B, C] -> cross-entropy.

The oracle of the chunked path (and the path of heads without a chunked form).

One function for both layouts of the class layer: all centres in this process (cross-entropy as
usual), or centres sharded across DDP ranks (`ShardedFC` after `shard`), where the global batch is
gathered, the head sees this rank's columns and the cross-entropy is reduced across ranks. Both give
the same loss and gradients for the same global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from elasticface.classifier.distributed import sharded_cross_entropy
from elasticface.classifier.sharded import ShardedFC
from elasticface.heads.base import MarginHead
from elasticface.heads.dense import dense_logits
from elasticface.heads.plan import HeadPlan
from elasticface.heads.shard import ClassShard


@dataclass
class MarginLoss:
    loss: Tensor  # cross-entropy (+ the head's auxiliary loss), the same value on every rank
    plan: HeadPlan  # what the head did: its auxiliary loss (already in `loss`) and margins
    cos: Tensor  # [N, C'] cosines against this process's (sampled / sharded) centres
    labels: Tensor  # [N] labels remapped into those columns, -1 where the class is not among them
    shard: ClassShard | None  # set when the centres are sharded: rows are then the global batch


def margin_softmax_loss(
    centers: nn.Module,
    head: MarginHead,
    embeddings: Tensor,
    labels: Tensor,
    shard: ClassShard | None = None,
    num_columns: int | None = None,
    margin_weight: float = 1.0,
) -> MarginLoss:
    """``shard``: the rows are already the gathered global batch (else sharded centres gather them here).
    ``num_columns``: the columns of every rank (sharded); None counts them with one all-reduce.
    ``margin_weight``: the share of the head's margin applied (the margin schedule's λ)."""
    if shard is None and isinstance(centers, ShardedFC) and centers.is_sharded:
        embeddings, labels, shard = centers.gather_batch(embeddings, labels)
    cos, mapped = centers(embeddings, labels)
    norms = embeddings.float().norm(dim=1) if head.needs_norms else None
    if shard is not None and num_columns is None:
        num_columns = int(shard.sum(torch.tensor(float(cos.shape[1] // head.centers_per_class), device=cos.device)))
    logits, plan = dense_logits(head, cos, mapped, norms, shard=shard, num_columns=num_columns,
                                margin_weight=margin_weight)
    loss = (
        F.cross_entropy(logits, mapped, ignore_index=-1)
        if shard is None
        else sharded_cross_entropy(logits, mapped, shard)
    )
    if plan.aux_loss is not None:
        # every rank computes the same aux from the global batch: count its gradient once
        loss = loss + (plan.aux_loss if shard is None else shard.replicated(plan.aux_loss))
    return MarginLoss(loss, plan, cos, mapped, shard)
