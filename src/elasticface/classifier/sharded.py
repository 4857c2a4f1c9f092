"""Model-parallel class centres: under DDP each rank owns a contiguous slice of the classes.

`ShardedFC` is `PartialFC` (sample_rate 1: every class, as `FullFC`) until :meth:`ShardedFC.shard`
keeps only this rank's classes, which the LightningModule does in `setup` once the process group
exists. A sharded layer takes the *global* batch (embeddings and labels of every rank, see
:func:`elasticface.classifier.distributed.gather_rows`) and returns cosines against its own classes (sampled:
its positives plus random local negatives), with labels remapped into its columns and -1 for
samples whose class lives on another rank.

Checkpoints always hold the full ``[C*K, D]`` centres and full optimizer state for them, so any
number of processes can resume any checkpoint, and eval/embed/export read it as an ordinary one:
:meth:`ShardedFC.gather_checkpoint` collects the shards on rank 0 when saving (one shard in flight
at a time), :meth:`ShardedFC.slice_checkpoint` keeps this rank's rows when loading.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from elasticface.classifier.centers import PartialFC
from elasticface.classifier.distributed import gather_rows, shard_bounds
from elasticface.heads.shard import ClassShard

#: checkpoint key recording where the centres live in the state dict and in each optimizer's state
CHECKPOINT_KEY = "class_centres"


class ShardedFC(PartialFC):
    """Class centres split across DDP ranks (C // world classes each, the remainder on the first ranks)."""

    def __init__(
        self,
        embedding_size: int,
        num_classes: int,
        sample_rate: float = 1.0,
        centers_per_class: int = 1,
        normalize: bool = True,
        init_std: float = 0.01,
    ) -> None:
        super().__init__(embedding_size, num_classes, sample_rate, centers_per_class, normalize, init_std)
        self.rank, self.world = 0, 1
        self.class_start, self.class_stop = 0, num_classes

    @property
    def is_sharded(self) -> bool:
        return self.world > 1

    @property
    def num_local_classes(self) -> int:
        return self.class_stop - self.class_start

    @property
    def row_slice(self) -> slice:
        """This rank's rows of the full ``[C*K, D]`` centre matrix."""
        k = self.centers_per_class
        return slice(self.class_start * k, self.class_stop * k)

    def shard(self, rank: int, world: int) -> None:
        """Keep only the classes of `rank` (before the optimizer is built; idempotent for the same rank/world)."""
        if (rank, world) == (self.rank, self.world):
            return
        if self.is_sharded:
            raise RuntimeError(f"ShardedFC is already sharded for rank {self.rank} of {self.world}")
        start, stop = shard_bounds(self.num_classes, world, rank)
        self.rank, self.world, self.class_start, self.class_stop = rank, world, start, stop
        self.weight = nn.Parameter(self.weight.detach()[self.row_slice].clone())

    def check_labels(self, labels: Tensor) -> None:
        """Sharded, labels >= C would silently find no centre on any rank: fail loudly (on every rank alike,
        as the labels are the gathered ones). One host sync per step; unsharded, indexing fails anyway."""
        if labels.numel() and int(labels.max()) >= self.num_classes:
            raise ValueError(
                f"label {int(labels.max())} in the training batch: must be < num_classes={self.num_classes}"
            )

    def rows(self, labels: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        if not self.is_sharded:
            return super().rows(labels)
        if labels is None or not self.training:
            return None, None
        self.check_labels(labels)
        owned = (labels >= self.class_start) & (labels < self.class_stop)
        local = torch.where(owned, labels - self.class_start, torch.full_like(labels, -1))
        num_sample = self.num_sample_of(self.num_local_classes)
        if num_sample >= self.num_local_classes:
            return None, local
        return self.sampled_rows(local, self.num_local_classes, num_sample)

    def num_sample_of(self, num_local_classes: int) -> int:
        """How many of a shard's classes a step samples (before `sample_classes` raises it to the batch size)."""
        return max(1, int(round(self.sample_rate * num_local_classes)))

    def num_columns_all_ranks(self, batch_size: int) -> int:
        """The classes all ranks' steps see together, from the shard sizes and the gathered batch size alone
        (each rank's sample is fixed in advance: `PartialFC.sample_classes`), so no rank asks the others."""
        total = 0
        for rank in range(self.world):
            start, stop = shard_bounds(self.num_classes, self.world, rank)
            local = stop - start
            sample = self.num_sample_of(local)
            total += local if sample >= local else min(local, max(sample, batch_size))
        return total

    def gather_batch(self, embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, ClassShard]:
        """The global batch (every rank's rows, in rank order; gradients flow back to their rank) and its shard."""
        embeddings, labels = gather_rows(embeddings, labels)
        return embeddings, labels, ClassShard(valid=labels >= 0, world=self.world)

    # -- checkpoints ---------------------------------------------------------------------------------
    def _gather_rows(self, local: Tensor) -> Tensor | None:
        """The full tensor on rank 0 (CPU), None elsewhere: each rank sends its shard to rank 0 in turn."""
        k = self.centers_per_class
        if dist.get_rank() != 0:
            dist.send(local.detach().contiguous(), dst=0)
            return None
        full = torch.empty((self.num_classes * k, *local.shape[1:]), dtype=local.dtype)
        for r in range(self.world):
            start, stop = shard_bounds(self.num_classes, self.world, r)
            if r == 0:
                part = local.detach()
            else:
                part = torch.empty(((stop - start) * k, *local.shape[1:]), dtype=local.dtype, device=local.device)
                dist.recv(part, src=r)
            full[start * k : stop * k] = part.cpu()
        return full

    def _is_row_tensor(self, value: Any) -> bool:
        return isinstance(value, Tensor) and value.shape == self.weight.shape

    def gather_checkpoint(self, checkpoint: dict[str, Any], key: str, optimizers: list[torch.optim.Optimizer]) -> None:
        """Record where the centres are and, when sharded, replace shards by full tensors (rank 0)."""
        param_ids: list[int | None] = []
        for optimizer in optimizers:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            param_ids.append(next((i for i, p in enumerate(params) if p is self.weight), None))
        checkpoint[CHECKPOINT_KEY] = {
            "key": key,
            "rows": self.num_classes * self.centers_per_class,
            "optimizer_param_ids": param_ids,
        }
        if not self.is_sharded:
            return
        full = self._gather_rows(checkpoint["state_dict"][key])
        if full is not None:
            checkpoint["state_dict"][key] = full
        for opt_state, pid in zip(checkpoint.get("optimizer_states", []), param_ids):
            if pid is None or pid not in opt_state["state"]:
                continue
            # a fresh dict: optimizer.state_dict() shares the live per-parameter state dicts
            state = opt_state["state"][pid] = dict(opt_state["state"][pid])
            for name in sorted(state):
                if self._is_row_tensor(state[name]):
                    full = self._gather_rows(state[name])
                    if full is not None:
                        state[name] = full

    def slice_checkpoint(self, checkpoint: dict[str, Any], key: str) -> None:
        """Keep this rank's rows of the full centres (and their optimizer state) in a loaded checkpoint."""
        full_rows = self.num_classes * self.centers_per_class
        if not self.is_sharded:
            return
        rows = self.row_slice
        weight = checkpoint["state_dict"][key]
        if weight.shape[0] == full_rows:
            checkpoint["state_dict"][key] = weight[rows].clone()
        record = checkpoint.get(CHECKPOINT_KEY) or {}
        for opt_state, pid in zip(checkpoint.get("optimizer_states", []), record.get("optimizer_param_ids", [])):
            if pid is None or pid not in opt_state["state"]:
                continue
            state = opt_state["state"][pid] = dict(opt_state["state"][pid])
            for name, value in list(state.items()):
                if isinstance(value, Tensor) and value.dim() >= 1 and value.shape[0] == full_rows:
                    state[name] = value[rows].clone()

    def extra_repr(self) -> str:
        return (
            f"num_classes={self.num_classes}, centers_per_class={self.centers_per_class}, "
            f"sample_rate={self.sample_rate}, rank={self.rank}, world={self.world}, "
            f"classes=[{self.class_start}, {self.class_stop})"
        )
