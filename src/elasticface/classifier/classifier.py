"""The class layer of a training step: centres (full, sampled, sharded) -> margin head -> cross-entropy.

``out = classifier(embeddings, labels)`` is all the LightningModule sees: the loss (with the head's
auxiliary loss), the step's statistics (θ_y, margins) and, through the hooks below, the checkpoint
gather/slice of sharded centres. Two paths give the same loss and gradients:

- ``chunked`` (default where the head has a :meth:`~elasticface.heads.base.MarginHead.plan`): the
  target logit from the B target centres, the non-target log-sum-exp over class chunks
  (:mod:`elasticface.classifier.chunked`); never a ``[B, C]`` tensor.
- ``dense``: cosines ``[B, C]`` -> the head's logits -> cross-entropy (:mod:`elasticface.classifier.dense`);
  the oracle, and the path of heads without a chunked form.

Inside, everything is fp32 (float64 stays float64) even under autocast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from elasticface.classifier.centers import FullFC
from elasticface.classifier.chunked import (
    DEFAULT_CHUNK_SIZE,
    chunked_logits,
    combine_shards,
    nontarget_lse,
    row_count,
    sum_shards,
    target_cosines,
)
from elasticface.classifier.dense import margin_softmax_loss
from elasticface.classifier.sharded import ShardedFC
from elasticface.heads.base import MarginHead
from elasticface.heads.plan import HeadPlan
from elasticface.heads.shard import ClassShard
from elasticface.utils.distributed import scale_grad

PATHS = ("auto", "chunked", "dense")


@dataclass
class ClassifierOutput:
    loss: Tensor  # cross-entropy (+ the head's auxiliary loss), the same value on every rank
    aux: Tensor | None  # the head's auxiliary loss (MagFace), already included in `loss`
    theta_y: Tensor  # [N] detached angle (radians) to each row's class centre (closest sub-centre); N = global rows
    valid: Tensor  # [N] rows with a label (the others have no θ_y)
    margins: Tensor | None  # [N] detached per-sample margins (Elastic*, MagFace, AdaFace); rows `valid`
    target_logit: Tensor  # [N] detached target logits z_y (with the margin as scheduled); rows `valid`

    @property
    def valid_margins(self) -> Tensor | None:
        """The margins of the rows with a label (a boolean mask: one host sync, so only where logged)."""
        return None if self.margins is None else self.margins[self.valid]


class Classifier(nn.Module):
    """Class centres and margin head; ``forward(embeddings, labels) -> ClassifierOutput`` (eval: logits).

    ``chunk_size``: classes per chunk of the chunked path, at least 1, capped at the number of classes (None: the
    measured default): one value serves a sweep over data sets of any size. ``path``: ``auto`` (chunked when the
    classes fill more than one chunk and the head's chunked step is as fast as its dense one:
    ``head.chunked_by_default``), ``chunked``, ``dense``.
    """

    def __init__(self, centers: FullFC, head: MarginHead, chunk_size: int | None = None, path: str = "auto") -> None:
        super().__init__()
        if path not in PATHS:
            raise ValueError(f"classifier path={path!r}: must be one of {list(PATHS)}")
        if chunk_size is not None and (
            isinstance(chunk_size, bool)
            or not isinstance(chunk_size, int)
            or chunk_size < 1
        ):
            raise ValueError(f"chunk_size={chunk_size!r}: must be a positive integer (classes per chunk)")
        self.centers = centers
        self.head = head
        self.chunk_size = chunk_size
        self.path = path

    @property
    def chunked(self) -> bool:
        """`auto`: chunked where the [B, C] logits would be larger than one chunk and the head's chunked step is
        as fast as its dense one (`head.chunked_by_default`). Up to one chunk the dense path holds no more than
        a chunk does and skips the backward's recomputation of the cosines (docs/class_layer.md)."""
        if self.path != "auto":
            return self.path == "chunked"
        return self.head.chunked_by_default and self.centers.num_classes > (
            self.chunk_size or DEFAULT_CHUNK_SIZE
        )

    @property
    def sharded(self) -> bool:
        """True when this rank holds only a slice of the class centres (ShardedFC under DDP)."""
        return isinstance(self.centers, ShardedFC) and self.centers.is_sharded

    # -- the step ------------------------------------------------------------------------------------
    head: MarginHead

    def forward(
        self, embeddings: Tensor, labels: Tensor | None = None, margin_weight: float = 1.0
    ) -> ClassifierOutput | Tensor:
        """``margin_weight``: how much of the head's margin this step applies (the margin schedule's λ, 1: all)."""
        if labels is None:  # eval: the head's logits against every (local) centre
            cos, _ = self.centers(embeddings)
            return self.head(cos)
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            if embeddings.dtype != torch.float64:
                embeddings = embeddings.float()
            shard: ClassShard | None = None
            if self.sharded:
                # DDP averages the backbone's gradients over ranks, but the gathered batch already hands each
                # rank the full dL/d(its embeddings): scale by world so the average is the exact gradient.
                embeddings = scale_grad(embeddings, self.centers.world)
                embeddings, labels, shard = self.centers.gather_batch(embeddings, labels)
            if self.chunked:
                return self._chunked(embeddings, labels, shard, margin_weight)
            return self._dense(embeddings, labels, shard, margin_weight)

    def _dense(
        self, embeddings: Tensor, labels: Tensor, shard: ClassShard | None, margin_weight: float
    ) -> ClassifierOutput:
        num_columns = self._num_columns(self.centers.num_classes, shard, labels.numel())
        out = margin_softmax_loss(self.centers, self.head, embeddings, labels, shard, num_columns, margin_weight)
        k = self.centers.centers_per_class
        cos_y = out.cos.detach().gather(1, out.labels.clamp_min(0)[:, None] * k + torch.arange(k, device=labels.device))
        cos_y, valid = cos_y.amax(dim=1), out.labels >= 0
        if shard is not None:  # the target column of a row may live on another rank
            cos_y, valid = shard.target_cos(cos_y, valid), shard.valid
        return self._output(out.loss, out.plan, cos_y, valid)

    def _chunked(
        self, embeddings: Tensor, labels: Tensor, shard: ClassShard | None, margin_weight: float
    ) -> ClassifierOutput:
        centers, head = self.centers, self.head
        # the step's rows of the centres (Partial FC: a sample) are read in place, chunk by chunk
        rows, mapped = centers.rows(labels)
        weight = centers.weight
        k, normalize = centers.centers_per_class, centers.normalize
        num = row_count(weight, rows) // k
        chunk = min(self.chunk_size or DEFAULT_CHUNK_SIZE, num)
        x = F.normalize(embeddings, dim=1) if normalize else embeddings
        weight = weight.to(x.dtype)

        # each row's target: the K centres of its class, pooled as the dense path pools them. The head's plan
        # needs cos θ_y before the chunked pass can start, and the chunked node also returns the target
        # cosines, so that the centres get one [C, D] gradient (autograd through an index of the centres
        # would allocate a second one): the plan sees a stand-in with the same value, and the target
        # logit is re-attached to the chunked node through its per-row derivative (it is elementwise in cos θ_y).
        owned = mapped >= 0
        with torch.no_grad():
            cos_y0 = target_cosines(x, weight, mapped, k, normalize, rows).amax(dim=1)
        stand_in = cos_y0.clone().requires_grad_(torch.is_grad_enabled())
        cos_y, valid = stand_in, owned
        norms = embeddings.norm(dim=1) if head.needs_norms else None
        if shard is not None:
            cos_y = sum_shards(torch.where(owned, cos_y, torch.zeros_like(cos_y)))
            valid = shard.valid
            if norms is not None:  # every rank computes the same head terms from the norms: count them once
                norms = shard.replicated(norms)

        def lse_of(fn: Any, scale: Any = None) -> Tensor:
            with torch.no_grad():
                lse = nontarget_lse(x.detach(), weight.detach(), mapped, fn, k, chunk, normalize, scale, rows)
                return lse if shard is None else combine_shards(lse)

        num_columns = self._num_columns(num, shard, mapped.numel())
        plan = head.plan(cos_y, valid, norms, num_columns=num_columns, nontarget_lse=lse_of, shard=shard,
                         margin_weight=margin_weight)
        lse, cos_t = chunked_logits(x, weight, mapped, plan.nontarget, k, chunk, normalize, plan.scale, rows)
        if shard is not None:
            lse = combine_shards(lse)
        z_y = plan.target
        if z_y.requires_grad:
            slope = torch.autograd.grad(z_y, stand_in, torch.ones_like(z_y), retain_graph=True, allow_unused=True)[0]
            if slope is not None:
                local = cos_t.amax(dim=1)
                z_y = z_y + slope * (local - local.detach())
        per_row = torch.logaddexp(lse, z_y) - z_y
        loss = torch.where(valid, per_row, torch.zeros_like(per_row)).sum() / valid.sum().to(per_row.dtype)
        if plan.aux_loss is not None:  # a function of the norms, whose gradient is already counted once across ranks
            loss = loss + plan.aux_loss
        return self._output(loss, plan, cos_y.detach(), valid)

    def _num_columns(self, local: int, shard: ClassShard | None, batch_size: int) -> int:
        """Classes the dense head would see: all shards' (sampled) columns."""
        if shard is None:
            return local
        if self.centers.sample_rate >= 1.0:
            return self.centers.num_classes
        return self.centers.num_columns_all_ranks(batch_size)

    def _output(self, loss: Tensor, plan: HeadPlan, cos_y: Tensor, valid: Tensor) -> ClassifierOutput:
        theta_y = torch.acos(cos_y.detach().clamp(-1.0, 1.0)) if self.head.normalized else cos_y
        return ClassifierOutput(loss, plan.aux_loss, theta_y, valid, plan.margins, plan.target.detach())

    # -- sharded centres and checkpoints ---------------------------------------------------------------
    def shard(self, rank: int, world: int) -> list[nn.Parameter]:
        """Keep this rank's slice of ShardedFC centres (world > 1); returns the parameters DDP must ignore."""
        if isinstance(self.centers, ShardedFC) and world > 1:
            self.centers.shard(rank, world)
            return [self.centers.weight]
        return []

    def gather_checkpoint(self, checkpoint: dict[str, Any], key: str, optimizers: list[torch.optim.Optimizer]) -> None:
        if isinstance(self.centers, ShardedFC):
            self.centers.gather_checkpoint(checkpoint, key, optimizers)

    def slice_checkpoint(self, checkpoint: dict[str, Any], key: str, num_classes: int, path: str) -> None:
        """Refuse centres for another number of classes; keep this rank's rows of sharded centres."""
        weight = checkpoint.get("state_dict", {}).get(key)
        k = self.centers.centers_per_class
        expected = num_classes * k
        if weight is not None and weight.shape[0] != expected:
            raise ValueError(
                f"{path}: its class centres hold {weight.shape[0] // k} classes ({weight.shape[0]} rows of "
                f"{key}) but the training data has num_classes={num_classes} "
                f"({expected} rows with {k} centres per class)"
            )
        if isinstance(self.centers, ShardedFC):
            self.centers.slice_checkpoint(checkpoint, key)
