"""The non-target log-sum-exp of a margin softmax, over class chunks: no [B, C] tensor, no normalised [C, D] copy.

For a margin head the cross-entropy of row i is ``logaddexp(LSE_{j≠y} z_ij, z_iy) − z_iy`` (no
cancellation): the target logit ``z_iy`` is a function of ``cos θ_y`` alone (computed from the B
target centres), and the non-target logits are an elementwise map of the cosines. :func:`nontarget_lse`
accumulates ``LSE_{j≠y}`` over chunks of classes with an online (max, sum), normalising each chunk of
centres as it goes; its backward recomputes each chunk's cosines and writes that chunk's rows of the
centres' gradient. Memory: the centres' gradient (which any exact path writes) plus a few
``[B, chunk]`` blocks. Time: one more ``[B, D] x [D, chunk]`` product per chunk than the dense path.

With centres sharded across ranks, each rank returns the LSE over its own classes and
:func:`combine_shards` merges the per-rank values through their (max, sum) pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

#: classes per chunk, chosen by measurement (benchmarks/bench_classifier.py, docs/class_layer.md)
DEFAULT_CHUNK_SIZE = 8192


def chunk_cosines(x: Tensor, weight: Tensor, normalize: bool, k: int) -> Tensor:
    """``[B, n]`` logits of ``x`` (already normalised) against raw centre rows ``[n·K, D]``, max over K sub-centres.

    The same ops as the dense centres layer (``F.normalize`` of the rows, ``F.linear``, clamp to [-1, 1]).
    """
    if normalize:
        cos = F.linear(x, F.normalize(weight, dim=1)).clamp_(-1.0, 1.0)
    else:
        cos = F.linear(x, weight)
    if k > 1:
        cos = cos.unflatten(1, (cos.shape[1] // k, k)).amax(dim=2)
    return cos


def _chunk_rows(weight: Tensor, rows: Tensor | None, start: int, stop: int) -> Tensor:
    """Columns ``start..stop`` of the layer: ``weight``'s rows, or the rows ``rows`` picks (Partial FC's sample)."""
    return weight[start:stop] if rows is None else weight[rows[start:stop]]


def row_count(weight: Tensor, rows: Tensor | None) -> int:
    """How many rows of ``weight`` the layer's columns are: all, or the ``rows`` picked."""
    return weight.shape[0] if rows is None else rows.numel()


def _drop_target_(z: Tensor, labels: Tensor, start: int) -> Tensor:
    """Set each row's own class in the chunk ``z [B, n]`` (columns ``start..``) to -inf, in O(B), with no host sync."""
    rows = torch.arange(z.shape[0], device=z.device)
    col = labels - start
    inside = (col >= 0) & (col < z.shape[1])
    col = col.clamp(0, z.shape[1] - 1)
    return z.index_put_(
        (rows, col), torch.where(inside, torch.full_like(col, 0, dtype=z.dtype) - float("inf"), z[rows, col])
    )


def _finite_or_zero(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def _row_lse(z: Tensor) -> Tensor:
    """Row-wise log-sum-exp through the fused ``log_softmax`` kernel (``torch.logsumexp`` is ~3x slower on CPU):
    at the row's maximum, ``log_softmax = -log Σ exp(z - max)`` exactly. Rows of -inf give -inf."""
    top, where = z.max(dim=1)
    at_top = torch.log_softmax(z, dim=1).gather(1, where[:, None])[:, 0]
    return torch.where(torch.isfinite(top), top - at_top, top)


def _scaled(x: Tensor, scale: Tensor | float) -> tuple[Tensor, Tensor | float, Tensor | float]:
    """``(x · s, lower, upper)``: the embeddings with the scale folded in and the clamp bounds ``∓s``."""
    if isinstance(scale, Tensor):
        s = scale.to(x.dtype).expand(x.shape[0])[:, None]
        return x * s, -s, s
    return x * scale, -scale, scale


def _unit_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``(ŵ, 1/max(‖w‖, eps))``: ``F.normalize``'s rows and their inverse norms."""
    inv = weight.norm(dim=1).clamp_min(1e-12).reciprocal()
    return weight * inv[:, None], inv


class _NonTargetLSE(torch.autograd.Function):
    """Two implementations of one function. Linear non-target logits (``scale · cos``, K = 1: most heads)
    take the fast path: the scale is folded into the embeddings, the normalisation's backward is
    written out, and each chunk costs one ``[B, n]`` buffer. Any other elementwise map or sub-centre
    pooling runs the chunk through autograd (recomputed in the backward).

    The fast path's backward treats the clamp of a cosine to [-1, 1] as the identity: a non-target
    cosine that rounds past ±1 gets the derivative of the unclamped cosine, where the dense path's
    clamp gives 0 (both are within rounding of each other in value).
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        weight: Tensor,
        labels: Tensor,
        fn: Callable[[Tensor], Tensor],  # type: ignore[override]
        k: int,
        chunk: int,
        normalize: bool,
        scale: Tensor | None,
        rows: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        num = row_count(weight, rows) // k
        with torch.no_grad():
            cos_t = _target_cosines(x, weight[_target_rows(labels, k, rows)], normalize)
        fast = scale is not None and k == 1
        lse = torch.full((x.shape[0],), -float("inf"), dtype=x.dtype, device=x.device)
        if fast:
            xs, lo, hi = _scaled(x, scale)
        for start in range(0, num, chunk):
            stop = min(start + chunk, num)
            if fast:
                w = _chunk_rows(weight, rows, start, stop)
                z = F.linear(xs, _unit_rows(w)[0] if normalize else w)
                if normalize:
                    z = torch.clamp(z, lo, hi, out=z)
            else:
                z = fn(chunk_cosines(x, _chunk_rows(weight, rows, start * k, stop * k), normalize, k))
            _drop_target_(z, labels, start)
            lse = torch.logaddexp(lse, _row_lse(z))
            del z
        ctx.fn, ctx.k, ctx.chunk, ctx.normalize, ctx.fast = fn, k, chunk, normalize, fast
        ctx.scale = scale if not isinstance(scale, Tensor) else None
        ctx.save_for_backward(x, weight, labels, lse, scale if isinstance(scale, Tensor) else None, rows)
        return lse, cos_t  # lse: -inf for a row with no non-target class

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor, grad_t: Tensor):  # type: ignore[override]
        x, weight, labels, lse, scale, rows = ctx.saved_tensors
        scale = ctx.scale if scale is None else scale
        if ctx.fast:
            grad_x, grad_w = _fast_backward(ctx, grad, x, weight, labels, lse, scale, rows)
        else:
            grad_x, grad_w = _autograd_backward(ctx, grad, x, weight, labels, lse, rows)
        # the target cosines' share, added into the same gradient (autograd through an index of the
        # centres would allocate a second full [C, D] gradient)
        target = _target_rows(labels, ctx.k, rows)
        with torch.enable_grad(), torch.autocast(device_type=x.device.type, enabled=False):
            xl = x.detach().requires_grad_(grad_x is not None)
            wl = weight[target].detach().requires_grad_(grad_w is not None)
            leaves = [t for t in (xl, wl) if t.requires_grad]
            grads = torch.autograd.grad(_target_cosines(xl, wl, ctx.normalize), leaves, grad_t)
        if grad_x is not None:
            grad_x += grads[0]
        if grad_w is not None:
            grad_w.index_add_(0, target.reshape(-1), grads[-1].reshape(-1, weight.shape[1]))
        return grad_x, grad_w, None, None, None, None, None, None, None


def target_cosines(x: Tensor, weight: Tensor, labels: Tensor, k: int, normalize: bool,
                   rows: Tensor | None = None) -> Tensor:
    """``[B, K]``: each row's cosines with its class's K centres (the values :func:`chunked_logits` returns)."""
    return _target_cosines(x, weight[_target_rows(labels, k, rows)], normalize)


def _target_rows(labels: Tensor, k: int, rows: Tensor | None = None) -> Tensor:
    """``[B, K]`` rows of ``weight`` holding each row's class centres (rows with label -1 read column 0)."""
    columns = labels.clamp_min(0)[:, None] * k + torch.arange(k, device=labels.device)
    return columns if rows is None else rows[columns]


def _target_cosines(x: Tensor, w_t: Tensor, normalize: bool) -> Tensor:
    """``[B, K]`` cosines (raw logits unnormalised) of each row with its K target centres ``w_t [B, K, D]``."""
    if normalize:
        return torch.einsum("nd,nkd->nk", x, F.normalize(w_t, dim=2)).clamp(-1.0, 1.0)
    return torch.einsum("nd,nkd->nk", x, w_t)


def _fast_backward(ctx, grad: Tensor, x: Tensor, weight: Tensor, labels: Tensor, lse: Tensor, scale: Tensor | float,
                   rows: Tensor | None):
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    finite = torch.isfinite(lse)
    coef = torch.where(finite, grad, torch.zeros_like(grad))
    # p = |coef_i| · softmax_ij in one pass: exp(z - (lse - log|coef|)); the signs go on the [B, D] side
    shift = (torch.where(finite, lse, torch.zeros_like(lse)) - torch.log(coef.abs()))[:, None]
    sign = torch.sign(coef)[:, None]
    xs, lo, hi = _scaled(x, scale)
    xs_signed = xs * sign
    grad_x = torch.zeros_like(x) if need_x else None
    grad_w = torch.zeros_like(weight) if need_w else None
    num = row_count(weight, rows)
    for start in range(0, num, ctx.chunk):
        stop = min(start + ctx.chunk, num)
        w = _chunk_rows(weight, rows, start, stop)
        if ctx.normalize:
            w_hat, inv = _unit_rows(w)
        else:
            w_hat, inv = w, None
        z = F.linear(xs, w_hat)
        if ctx.normalize:
            z = torch.clamp(z, lo, hi, out=z)
        _drop_target_(z, labels, start)
        p = z.sub_(shift).exp_()
        if need_x:
            grad_x.addmm_(p, w_hat)
        if need_w:
            g_hat = p.T @ xs_signed  # [n, D]: dLSE/dŵ
            if ctx.normalize:  # F.normalize's backward: (g - ŵ (ŵ·g)) / ‖w‖
                g_hat = (g_hat - w_hat * (w_hat * g_hat).sum(dim=1, keepdim=True)) * inv[:, None]
            _write_rows(grad_w, rows, start, stop, g_hat)
        del z, p
    if need_x:
        grad_x.mul_(hi * sign)
    return grad_x, grad_w


def _autograd_backward(ctx, grad: Tensor, x: Tensor, weight: Tensor, labels: Tensor, lse: Tensor,
                       rows: Tensor | None):
    k, chunk, fn = ctx.k, ctx.chunk, ctx.fn
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    finite = torch.isfinite(lse)
    coef = torch.where(finite, grad, torch.zeros_like(grad))[:, None]
    lse = torch.where(finite, lse, torch.zeros_like(lse))[:, None]
    grad_x = torch.zeros_like(x) if need_x else None
    grad_w = torch.zeros_like(weight) if need_w else None
    num = row_count(weight, rows) // k
    with torch.enable_grad(), torch.autocast(device_type=x.device.type, enabled=False):
        for start in range(0, num, chunk):
            stop = min(start + chunk, num)
            xl = x.detach().requires_grad_(need_x)
            wl = _chunk_rows(weight, rows, start * k, stop * k).detach().requires_grad_(need_w)
            z = fn(chunk_cosines(xl, wl, ctx.normalize, k))
            # dLSE/dz = softmax over the non-target columns; zero at the target
            p = torch.exp(_drop_target_(z.detach().clone(), labels, start) - lse)
            leaves = [t for t in (xl, wl) if t.requires_grad]
            grads = torch.autograd.grad(z, leaves, p.mul_(coef))
            if need_x:
                grad_x += grads[0]
            if need_w:
                _write_rows(grad_w, rows, start * k, stop * k, grads[-1])
    return grad_x, grad_w


def _write_rows(grad_w: Tensor, rows: Tensor | None, start: int, stop: int, value: Tensor) -> None:
    """The gradient of columns ``start..stop`` into their rows of the centres' gradient (sampled rows are distinct)."""
    if rows is None:
        grad_w[start:stop] = value
    else:
        grad_w.index_copy_(0, rows[start:stop], value)


def chunked_logits(
    x: Tensor,
    weight: Tensor,
    labels: Tensor,
    fn: Callable[[Tensor], Tensor],
    k: int = 1,
    chunk: int = DEFAULT_CHUNK_SIZE,
    normalize: bool = True,
    scale: Tensor | float | None = None,
    rows: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(lse [B], cos_t [B, K])``: :func:`nontarget_lse` and the cosines of each row with its K target
    centres (clamped as the dense path clamps), both differentiable, with one [C·K, D] centre gradient."""
    if isinstance(scale, Tensor):
        scale = scale.detach()
    elif scale is not None:
        scale = float(scale)
    return _NonTargetLSE.apply(x, weight, labels, fn, k, chunk, normalize, scale, rows)


def nontarget_lse(
    x: Tensor,
    weight: Tensor,
    labels: Tensor,
    fn: Callable[[Tensor], Tensor],
    k: int = 1,
    chunk: int = DEFAULT_CHUNK_SIZE,
    normalize: bool = True,
    scale: Tensor | float | None = None,
    rows: Tensor | None = None,
) -> Tensor:
    """``[B]``: ``log Σ_{j ≠ labels_i} exp(fn(cos_ij))`` over the classes of ``weight`` ([C·K, D], raw rows).

    ``x``: the embeddings, already normalised when ``normalize``; ``labels``: column of each row's class
    in ``weight`` or -1 (then every class counts); ``fn``: elementwise map from cosines to logits;
    ``scale`` (> 0, a number, 0-d or [B] tensor, detached): say that ``fn(c) == scale * c`` (the fast path);
    ``rows`` (distinct, ascending): the columns are these rows of ``weight`` (Partial FC's sample), not all of them.
    Differentiable in ``x`` and ``weight``.
    """
    return chunked_logits(x, weight, labels, fn, k, chunk, normalize, scale, rows)[0]


class _CombineShards(torch.autograd.Function):
    """``log Σ_ranks exp(lse_r)`` from each rank's (max, sum) pair; the gradient goes to each rank's own term."""

    @staticmethod
    def forward(ctx, lse: Tensor) -> Tensor:  # type: ignore[override]
        top = lse.detach().clone()
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        shift = _finite_or_zero(top)
        total = torch.exp(lse.detach() - shift)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        out = shift + torch.log(total)
        ctx.save_for_backward(lse, out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        lse, out = ctx.saved_tensors
        share = torch.exp(lse - _finite_or_zero(out))
        return torch.where(torch.isfinite(out), grad * share, torch.zeros_like(grad))


def combine_shards(lse: Tensor) -> Tensor:
    """The LSE over every rank's classes from this rank's ``lse [B]`` (same value on every rank)."""
    return _CombineShards.apply(lse)


class _SumShards(torch.autograd.Function):
    """All-reduce sum of a tensor each rank holds in part (zeros elsewhere); the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        out = x.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad


def sum_shards(x: Tensor) -> Tensor:
    """Sum over ranks of ``x``; each rank's part receives the gradient of the (replicated) result."""
    return _SumShards.apply(x)
