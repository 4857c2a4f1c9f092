"""The one target transform behind most heads: ``s * (cos(m1*θ_y + m2) - m3)`` on target logits only.

Everything here is O(B): the heads gather ``cos θ_y`` per row, transform it, and write it back into
``s * cos``. No [B, C] margin or one-hot tensor is ever built.

Guards (what happens when ``φ = m1*θ + m2`` leaves [0, π], where ``cos φ`` stops decreasing in θ):

- ``none``: plain ``cos φ - m3`` (the released ElasticFace code; not monotone past π).
- ``easy``: insightface's ``easy_margin``: the margin only where ``cos θ > 0``, else ``cos θ``.
- ``thmm``: insightface / pytorch-metric-learning: past ``φ > π`` use ``cos θ - m3 - m2·sin(m2)``
  (monotone for m1 = 1, m2 in [0, π/2)).
- ``clip``: ``cos(clamp(φ, 0, π)) - m3`` (AdaFace's clip; flat, zero gradient, outside [0, π]).
- ``continuous``: SphereFace's monotone extension ``(-1)^k cos φ - 2k - m3``, ``k = floor(φ/π)``;
  continuous and strictly decreasing in θ for every m1 > 0.

Gradients: ``exact`` backpropagates through the margin (ArcFace paper, ElasticFace, MagFace, AdaFace
code); ``straight_through`` keeps the margin's value but the gradient of plain ``cos θ`` (current
insightface arcface_torch, which edits the logits under ``no_grad``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal, Union

import torch
from torch import Tensor

from elasticface.heads.plan import HeadPlan
from elasticface.heads.shard import active_shard

Guard = Literal["none", "easy", "thmm", "clip", "continuous"]
Gradient = Literal["exact", "straight_through"]
GUARDS: tuple[str, ...] = ("none", "easy", "thmm", "clip", "continuous")
GRADIENTS: tuple[str, ...] = ("exact", "straight_through")
Scalar = Union[float, Tensor]

# Floor for 1 - cos^2 in the acos derivative: caps |d acos / d cos| at 1e3 so the gradient stays
# finite when an embedding sits exactly on its class centre (cos = 1) or its opposite (cos = -1).
_ONE_MINUS_COS2_MIN = 1e-6


class _SafeAcos(torch.autograd.Function):
    """acos with an exact value and a finite derivative at |x| = 1 (saves only its input)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.acos(x.clamp(-1.0, 1.0))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        xc = x.clamp(-1.0, 1.0)
        denom = ((1.0 - xc) * (1.0 + xc)).clamp_min(_ONE_MINUS_COS2_MIN).rsqrt()
        return -grad * denom


def safe_acos(x: Tensor) -> Tensor:
    """``acos(clamp(x, -1, 1))`` whose gradient is finite everywhere, including x = ±1."""
    return _SafeAcos.apply(x)


def margin_target(
    cos_y: Tensor,
    m1: Scalar = 1.0,
    m2: Scalar = 0.0,
    m3: Scalar = 0.0,
    guard: str = "none",
    gradient: str = "exact",
) -> Tensor:
    """Unscaled target value ``cos(m1*θ + m2) - m3`` for a vector of target cosines, with a guard.

    ``m1``, ``m2``, ``m3`` are floats or tensors shaped like ``cos_y`` (per-sample margins). Both
    branches of every ``torch.where`` are finite, so no NaN leaks into the gradient.
    """
    c = cos_y.clamp(-1.0, 1.0)
    if isinstance(m1, (int, float)) and m1 == 1.0 and isinstance(m2, (int, float)) and m2 == 0.0:
        target = c - m3  # CosFace-type: no angle needed, exact for every guard (φ = θ in [0, π])
    else:
        theta = safe_acos(c)
        phi = theta * m1 + m2 if not (isinstance(m1, (int, float)) and m1 == 1.0) else theta + m2
        if guard == "none":
            target = torch.cos(phi) - m3
        elif guard == "easy":
            target = torch.where(c > 0, torch.cos(phi) - m3, c)
        elif guard == "thmm":
            mm = m2 * torch.sin(m2) if isinstance(m2, Tensor) else m2 * math.sin(m2)
            target = torch.where(phi.detach() <= math.pi, torch.cos(phi) - m3, c - m3 - mm)
        elif guard == "clip":
            target = torch.cos(phi.clamp(0.0, math.pi)) - m3
        elif guard == "continuous":
            k = torch.floor(phi.detach() / math.pi)
            sign = 1.0 - 2.0 * torch.remainder(k, 2.0)
            target = sign * torch.cos(phi) - 2.0 * k - m3
        else:
            raise ValueError(f"guard={guard!r}: must be one of {GUARDS}")
    if gradient == "straight_through":
        return c + (target - c).detach()
    if gradient != "exact":
        raise ValueError(f"gradient={gradient!r}: must be one of {GRADIENTS}")
    return target


def gather_target(cos: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(cos_y, valid, cols)``: target cosines per row (rows with label -1 read column 0)."""
    valid = labels >= 0
    cols = labels.clamp(min=0)
    cos_y = cos.gather(1, cols.unsqueeze(1)).squeeze(1)
    return cos_y, valid, cols


def batch_target_cos(cos_y: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """``(cos θ_y, valid)`` of every row of the batch, detached, for batch statistics and thresholds.

    With class centres sharded across ranks (:func:`elasticface.classifier.distributed.use_shard`) a row's target
    column may live on another rank: its ``cos θ_y`` is read from there, and ``valid`` marks every row
    with a label anywhere. Otherwise it is ``gather_target``'s result.
    """
    shard = active_shard()
    if shard is None:
        return cos_y.detach(), valid
    return shard.target_cos(cos_y, valid), shard.valid


def batch_logsumexp(z: Tensor) -> Tensor:
    """Row-wise logsumexp over all columns of every shard (detached): ``torch.logsumexp(z, 1)`` unsharded."""
    shard = active_shard()
    if shard is None:
        return torch.logsumexp(z.detach(), dim=1)
    row_max = shard.max(z.max(dim=1).values)
    return shard.sum(torch.exp(z.detach() - row_max[:, None]).sum(dim=1)).log() + row_max


def batch_num_columns(cos: Tensor) -> int:
    """Number of class columns over all shards (``cos.shape[1]`` unsharded)."""
    shard = active_shard()
    if shard is None:
        return cos.shape[1]
    return int(shard.sum(torch.tensor(float(cos.shape[1]), device=cos.device)))


def batch_valid(labels: Tensor) -> Tensor:
    """Rows with a label, over all shards of the class dimension (``labels >= 0`` when unsharded)."""
    shard = active_shard()
    return labels >= 0 if shard is None else shard.valid


def margin_plan(
    cos_y: Tensor,
    s: float,
    m1: Scalar = 1.0,
    m2: Scalar = 0.0,
    m3: Scalar = 0.0,
    guard: str = "none",
    gradient: str = "exact",
):
    """:func:`margin_logits` as a :class:`~elasticface.heads.plan.HeadPlan`: the margined target, ``s·cos``
    elsewhere."""

    return HeadPlan(margin_target(cos_y, m1, m2, m3, guard, gradient) * s, lambda c: c * s, s)


def put_target(logits: Tensor, cols: Tensor, valid: Tensor, values: Tensor) -> Tensor:
    """Write ``values`` into ``logits[i, cols[i]]`` for valid rows, in place on a fresh tensor.

    ``logits`` must be a non-leaf result whose backward does not need its own value (``s * cos``):
    then the in-place write is safe for autograd and avoids a second [B, C] copy. Invalid rows get
    their current value written back, which keeps the op free of host syncs.
    """
    rows = torch.arange(cols.numel(), device=cols.device)
    current = logits[rows, cols]
    return logits.index_put_((rows, cols), torch.where(valid, values.to(logits.dtype), current))


def scale_rows(cos: Tensor, s: Scalar) -> Tensor:
    """``s * cos`` for a scalar or per-sample scale."""
    if isinstance(s, Tensor) and s.dim() == 1:
        return cos * s.unsqueeze(1)
    return cos * s


class _ReplaceTarget(torch.autograd.Function):
    """``s * cos`` with ``s * target_fn(cos_y, *params)`` written into the target column of valid rows.

    Autograd through ``gather`` + ``index_put`` would cost three extra [B, C] passes in backward (a
    dense zero tensor for the gather, a clone for the in-place write, a sum of the two). Here the
    backward is one [B, C] pass (``grad * s``) plus an O(B) fix-up of the target entries, whose
    gradients autograd recomputes from ``target_fn`` on [B]-sized leaves.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, cos: Tensor, cols: Tensor, valid: Tensor, s: float, target_fn: Callable[..., Tensor], *params: Any
    ) -> Tensor:
        rows = torch.arange(cols.numel(), device=cols.device)
        cos_y = cos[rows, cols]
        target = target_fn(cos_y, *params)
        out = cos * s
        out[rows, cols] = torch.where(valid, target.to(out.dtype) * s, out[rows, cols])
        ctx.s, ctx.target_fn = s, target_fn
        ctx.is_tensor = [isinstance(p, Tensor) for p in params]
        ctx.save_for_backward(cols, valid, cos_y, *[p for p in params if isinstance(p, Tensor)])
        ctx.others = [p for p in params if not isinstance(p, Tensor)]
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        cols, valid, cos_y, *tensor_params = ctx.saved_tensors
        rows = torch.arange(cols.numel(), device=cols.device)
        needs = ctx.needs_input_grad
        tensors, others = iter(tensor_params), iter(ctx.others)
        params = [next(tensors) if is_t else next(others) for is_t in ctx.is_tensor]
        leaves = [cos_y.detach().requires_grad_()]
        for i, p in enumerate(params):
            if isinstance(p, Tensor) and needs[5 + i]:
                params[i] = p.detach().requires_grad_()
                leaves.append(params[i])
        grad_y = torch.where(valid, grad[rows, cols], torch.zeros((), dtype=grad.dtype, device=grad.device))
        with torch.enable_grad(), torch.autocast(device_type=grad.device.type, enabled=False):
            target = ctx.target_fn(leaves[0], *params) * ctx.s
            leaf_grads = torch.autograd.grad(target, leaves, grad_y.to(target.dtype), allow_unused=True)
        grad_cos = None
        if needs[0]:
            grad_cos = grad * ctx.s
            g_c = leaf_grads[0] if leaf_grads[0] is not None else torch.zeros_like(grad_y)
            grad_cos[rows, cols] = torch.where(valid, g_c.to(grad.dtype), grad_cos[rows, cols])
        out: list[Tensor | None] = [grad_cos, None, None, None, None]
        it = iter(leaf_grads[1:])
        for i, p in enumerate(params):
            out.append(next(it) if isinstance(p, Tensor) and needs[5 + i] else None)
        return tuple(out)


def replace_target(
    cos: Tensor, labels: Tensor, s: float, target_fn: Callable[..., Tensor], *params: Tensor | float
) -> Tensor:
    """``s * cos`` with target logits ``s * target_fn(cos_y, *params)`` for rows with label >= 0.

    ``target_fn`` must be an O(B) function of [B] tensors; ``params`` (per-sample margins) may carry
    gradients (MagFace's margin depends on the feature norm).
    """
    valid = labels >= 0
    cols = labels.clamp(min=0)
    return _ReplaceTarget.apply(cos, cols, valid, float(s), target_fn, *params)


def margin_logits(
    cos: Tensor,
    labels: Tensor,
    s: Scalar,
    m1: Scalar = 1.0,
    m2: Scalar = 0.0,
    m3: Scalar = 0.0,
    guard: str = "none",
    gradient: str = "exact",
) -> Tensor:
    """``s * cos`` with the generic margin applied to the target logit of every row with label >= 0."""
    if isinstance(s, Tensor):
        cos_y, valid, cols = gather_target(cos, labels)
        target = margin_target(cos_y, m1, m2, m3, guard, gradient)
        return put_target(scale_rows(cos, s), cols, valid, target * s)

    def fn(c: Tensor, a: Scalar, b: Scalar, d: Scalar) -> Tensor:
        return margin_target(c, a, b, d, guard, gradient)

    return replace_target(cos, labels, s, fn, m1, m2, m3)
