"""The dense ``[B, C]`` logits of a training batch, built from the head's plan: the oracle form of every head.

``plan.nontarget`` maps the whole cosine matrix, and each row's target column gets ``plan.target``.
The plan sees a detached stand-in of ``cos θ_y``; the target logit's derivative in it (the target is
elementwise in ``cos θ_y``) is written into the target column's gradient, so the target logit needs
no autograd through a gather of ``[B, C]``. Its graph still carries every other input (MagFace's
margin is a function of the norms).

Linear non-target maps (``plan.scale`` set: most heads) take one custom op whose backward is a single
``[B, C]`` pass (``grad · s``) plus an O(B) fix-up of the target entries; other maps run through autograd.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .plan import HeadPlan
from .shard import ClassShard
from elasticface.utils.errors import BadValue


def _times(cos: Tensor, scale: float | Tensor) -> Tensor:
    """``scale · cos`` for a number, a 0-d or a per-row ``[B]`` scale."""
    if isinstance(scale, Tensor) and scale.dim() == 1:
        return cos * scale[:, None]
    return cos * scale


class _ScaleAndPlace(torch.autograd.Function):
    """``scale · cos`` with ``target`` written into each valid row's target column."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, cos: Tensor, cols: Tensor, valid: Tensor, scale: float | Tensor, target: Tensor, slope: Tensor | None
    ) -> Tensor:
        rows = torch.arange(cols.numel(), device=cols.device)
        out = _times(cos, scale)
        out[rows, cols] = torch.where(valid, target.detach().to(out.dtype), out[rows, cols])
        ctx.scale = scale
        ctx.save_for_backward(cols, valid, slope)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        cols, valid, slope = ctx.saved_tensors
        rows = torch.arange(cols.numel(), device=cols.device)
        grad_y = torch.where(valid, grad[rows, cols], torch.zeros((), dtype=grad.dtype, device=grad.device))
        grad_cos = None
        if ctx.needs_input_grad[0]:
            grad_cos = _times(grad, ctx.scale)
            at_target = grad_y * slope.to(grad.dtype) if slope is not None else torch.zeros_like(grad_y)
            grad_cos[rows, cols] = torch.where(valid, at_target, grad_cos[rows, cols])
        grad_target = grad_y if ctx.needs_input_grad[4] else None
        return grad_cos, None, None, None, grad_target, None


def _slope(target: Tensor, cos_y: Tensor) -> Tensor | None:
    """``d target_i / d cos_y_i`` (detached), or None where the target does not depend on ``cos_y``."""
    if not (target.requires_grad and cos_y.requires_grad):
        return None
    return torch.autograd.grad(target, cos_y, torch.ones_like(target), retain_graph=True, allow_unused=True)[0]


def _nontarget_lse(cos: Tensor, cols: Tensor, owned: Tensor, shard: ClassShard | None, fn: Any, scale: Any = None):
    """Detached ``log Σ_{j ≠ y} exp(fn(cos_j))`` per row, over every shard's columns."""
    with torch.no_grad():
        rows = torch.arange(cols.numel(), device=cols.device)
        z = fn(cos.detach())
        if z.data_ptr() == cos.data_ptr():
            z = z.clone()
        z.index_put_((rows, cols), torch.where(owned, torch.full_like(z[rows, cols], -float("inf")), z[rows, cols]))
        lse = torch.logsumexp(z, dim=1)
        return lse if shard is None else shard.combine_lse(lse)


def dense_logits(
    head: nn.Module,
    cos: Tensor,
    labels: Tensor,
    norms: Tensor | None = None,
    *,
    shard: ClassShard | None = None,
    num_columns: int | None = None,
    margin_weight: float = 1.0,
) -> tuple[Tensor, HeadPlan]:
    """``(logits [B, C], plan)`` of a :class:`~elasticface.heads.base.MarginHead` for cosines ``[B, C·K]``
    and labels ``[B]`` (-1: the class is not among the columns).

    ``shard``: the columns are this rank's slice of a sharded class dimension and the rows the global
    batch; ``num_columns`` (then required) counts every rank's columns. ``margin_weight``: see
    :meth:`~elasticface.heads.base.MarginHead.plan`.
    """
    with torch.autocast(device_type=cos.device.type, enabled=False):
        if cos.dtype != torch.float64:
            cos = cos.float()
        if cos.dim() != 2 or labels.shape != cos.shape[:1]:
            raise BadValue(
                f"{type(head).__name__}: cos must be [B, C] and labels [B], got {tuple(cos.shape)} "
                f"and {tuple(labels.shape)}"
            )
        cos = head.pool(cos)
        labels = labels.long()
        owned, cols = labels >= 0, labels.clamp(min=0)
        rows = torch.arange(cols.numel(), device=cols.device)
        local_y = cos.detach()[rows, cols]
        if shard is None:
            cos_y, valid, num_columns = local_y, owned, cos.shape[1]
        else:
            if num_columns is None:
                raise BadValue("dense_logits: a sharded call needs num_columns (every rank's columns)")
            cos_y, valid = shard.target_cos(local_y, owned), shard.valid
        stand_in = cos_y.clone().requires_grad_(torch.is_grad_enabled())

        def lse_of(fn: Any, scale: Any = None) -> Tensor:
            return _nontarget_lse(cos, cols, owned, shard, fn, scale)

        plan = head.plan(stand_in, valid, norms, num_columns=num_columns, nontarget_lse=lse_of, shard=shard,
                         margin_weight=margin_weight)
        if plan.target is stand_in and plan.scale == 1.0 and shard is None:
            return cos, plan  # the identity plan (Softmax): the logits are the cosines themselves
        slope = _slope(plan.target, stand_in)
        if plan.scale is not None:
            scale = plan.scale.detach() if isinstance(plan.scale, Tensor) else float(plan.scale)
            return _ScaleAndPlace.apply(cos, cols, owned, scale, plan.target, slope), plan
        target = plan.target
        if slope is not None:  # re-attach the target logit to the cosine it came from
            target = target + slope.detach() * (cos[rows, cols] - local_y)
        logits = plan.nontarget(cos)
        # in place on a fresh result whose backward does not need its own value (autograd checks this)
        return logits.index_put_((rows, cols), torch.where(owned, target.to(logits.dtype), logits[rows, cols])), plan
