"""Collectives for the model-parallel class layer: each rank owns a slice of the class centres.

The global batch (every rank's embeddings and labels) meets this rank's centres; the softmax over
all classes is then reduced across ranks. Three pieces make that exact:

- :func:`gather_rows`: all-gather along the batch with the gradient summed back to the owning rank,
  so every embedding receives the full dL/dx from all shards.
- :class:`ClassShard` (handed to the head with the batch): what a head needs to know when its ``cos``
  holds only some columns: each row's ``cos θ_y`` wherever its class lives, which rows have a label
  at all, and reductions over the class dimension (AdaCos, CurricularFace, ElasticFace+ read them).
- :func:`sharded_cross_entropy`: the cross-entropy of the full softmax from per-rank column slices
  (a global max and a global sum of exponentials), with the exact local gradient.

Without an initialised process group (or with one process) none of this is used.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from elasticface.heads.shard import ClassShard
from elasticface.utils.distributed import rank_and_world


def shard_bounds(num_classes: int, world: int, rank: int) -> tuple[int, int]:
    """Classes ``[start, stop)`` of ``rank``: C // world each, the remainder spread over the first ranks."""
    if world > num_classes:
        raise ValueError(
            f"world size {world} > num_classes={num_classes}: rank {num_classes} and above would hold no class "
            f"centres; use at most {num_classes} processes or model=default"
        )
    base, extra = divmod(num_classes, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class _GatherRows(torch.autograd.Function):
    """Concatenate every rank's rows (sizes may differ); backward sums the gradient over ranks, keeps ours."""

    @staticmethod
    def forward(ctx, x: Tensor, sizes: list[int]) -> Tensor:  # type: ignore[override]
        rank, _ = rank_and_world()
        widest = max(sizes)
        padded = x.new_zeros((widest, *x.shape[1:]))
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        ctx.start, ctx.stop = sum(sizes[:rank]), sum(sizes[: rank + 1])
        return torch.cat([p[:n] for p, n in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.start : ctx.stop], None


def gather_rows(*tensors: Tensor) -> list[Tensor]:
    """All-gather each tensor along dim 0 in rank order; gradients flow back to the rank that sent the rows."""
    n = torch.tensor([tensors[0].shape[0]], device=tensors[0].device)
    sizes = [torch.empty_like(n) for _ in range(rank_and_world()[1])]
    dist.all_gather(sizes, n)
    sizes_list = [int(s) for s in sizes]
    return [_GatherRows.apply(t, sizes_list) for t in tensors]


class _ShardedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over rows with a label; columns split across ranks; labels -1 where the class lives
    elsewhere."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, valid: Tensor) -> Tensor:  # type: ignore[override]
        row_max = logits.detach().max(dim=1).values
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX)
        probs = (logits.detach() - row_max[:, None]).exp_()
        sum_exp = probs.sum(dim=1)
        dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM)
        owned = labels >= 0
        cols = labels.clamp_min(0)
        z_y = torch.where(owned, logits.detach().gather(1, cols[:, None]).squeeze(1), torch.zeros_like(row_max))
        dist.all_reduce(z_y, op=dist.ReduceOp.SUM)
        per_row = sum_exp.log() + row_max - z_y
        n = valid.sum().to(logits.dtype)
        loss = torch.where(valid, per_row, torch.zeros_like(per_row)).sum() / n
        probs.div_(sum_exp[:, None])
        ctx.save_for_backward(probs, cols, owned & valid, valid, n)
        return loss

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        probs, cols, owned, valid, n = ctx.saved_tensors
        weight = torch.where(valid, grad / n, torch.zeros_like(grad))
        out = probs * weight[:, None]
        rows = torch.arange(cols.numel(), device=cols.device)
        out[rows, cols] -= torch.where(owned, weight, torch.zeros_like(weight))
        return out, None, None


def sharded_cross_entropy(logits: Tensor, labels: Tensor, shard: ClassShard) -> Tensor:
    """``F.cross_entropy(full_logits, global_labels, ignore_index=-1)`` from this rank's columns.

    Every rank returns the same value; the backward gives each rank the gradient of its own columns.
    """
    return _ShardedCrossEntropy.apply(logits.float(), labels, shard.valid)
