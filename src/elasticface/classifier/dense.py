"""The dense margin softmax loss: class centres -> cosines [B, C] -> head logits [B, C] -> cross-entropy.

The oracle of the chunked path (and the path of heads without a chunked form).

One function for both layouts of the class layer: all centres in this process (cross-entropy as
usual), or centres sharded across DDP ranks (`ShardedFC` after `shard`), where the global batch is
gathered, the head sees this rank's columns and the cross-entropy is reduced across ranks. Both give
the same loss and gradients for the same global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from elasticface.classifier.distributed import sharded_cross_entropy
from elasticface.heads.shard import ClassShard, use_shard
from elasticface.classifier.sharded import ShardedFC


@dataclass
class MarginLoss:
    loss: Tensor  # cross-entropy (+ the head's auxiliary loss), the same value on every rank
    aux: Tensor | None  # the head's auxiliary loss (MagFace), already included in `loss`
    cos: Tensor  # [N, C'] cosines against this process's (sampled / sharded) centres
    labels: Tensor  # [N] labels remapped into those columns, -1 where the class is not among them
    shard: ClassShard | None  # set when the centres are sharded: rows are then the global batch


def margin_softmax_loss(
    centers: nn.Module, head: nn.Module, embeddings: Tensor, labels: Tensor, shard: ClassShard | None = None
) -> MarginLoss:
    """``shard``: the rows are already the gathered global batch (else sharded centres gather them here)."""
    if shard is None and isinstance(centers, ShardedFC) and centers.is_sharded:
        embeddings, labels, shard = centers.gather_batch(embeddings, labels)
    cos, mapped = centers(embeddings, labels)
    norms = embeddings.float().norm(dim=1) if getattr(head, "needs_norms", False) else None
    with use_shard(shard):
        logits = head(cos, mapped, norms)
    loss = (
        F.cross_entropy(logits, mapped, ignore_index=-1)
        if shard is None
        else sharded_cross_entropy(logits, mapped, shard)
    )
    aux = getattr(head, "aux_loss", None)
    if aux is not None:
        # every rank computes the same aux from the global batch: count its gradient once
        loss = loss + (aux if shard is None else shard.replicated(aux))
    return MarginLoss(loss, aux, cos, mapped, shard)
