"""What a head sees of a sharded class dimension (model parallel): the active :class:`ClassShard`.

The classifier makes a shard active (:func:`use_shard`) around the head's call; a head that needs a
statistic over all classes or a row's target cosine from another rank reads it through
:func:`active_shard`. It lives with the heads because they read it; the classifier, above them, sets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


_ACTIVE: ContextVar[ClassShard | None] = ContextVar("elasticface_class_shard", default=None)


def active_shard() -> ClassShard | None:
    """The :class:`ClassShard` of the head call in progress, or None when the head sees all classes."""
    return _ACTIVE.get()


@contextmanager
def use_shard(shard: ClassShard | None) -> Iterator[None]:
    token = _ACTIVE.set(shard)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
