"""What a head sees of a sharded class dimension (model parallel): a :class:`ClassShard`.

The classifier hands it to the head with the batch (:class:`~elasticface.heads.plan.HeadInputs`); it
lives with the heads because they read it, and the classifier, above them, makes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from elasticface.utils.distributed import scale_grad


@dataclass(frozen=True)
class ClassShard:
    """This rank's columns are a slice of the class dimension; rows are the global batch.

    ``valid``: rows whose label is >= 0 on some rank (the heads' local ``labels >= 0`` marks only the
    rows whose class lives here).
    """

    valid: Tensor
    world: int

    def sum(self, x: Tensor) -> Tensor:
        out = x.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def max(self, x: Tensor) -> Tensor:
        out = x.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return out

    def target_cos(self, cos_y: Tensor, local_valid: Tensor) -> Tensor:
        """Every row's (detached) target cosine, read from the rank that owns its class."""
        return self.sum(torch.where(local_valid, cos_y.detach(), torch.zeros_like(cos_y)))

    def replicated(self, x: Tensor) -> Tensor:
        """A term every rank computes identically from the global batch: its gradient counted once, not world times."""
        return scale_grad(x, 1.0 / self.world)

    def combine_lse(self, lse: Tensor) -> Tensor:
        """The (detached) log-sum-exp over every rank's columns, from this rank's ``lse [B]``."""
        top = self.max(lse)
        shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        return self.sum(torch.exp(lse.detach() - shift)).log() + shift
