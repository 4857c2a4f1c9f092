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

#: classes per chunk, chosen by measurement (benchmarks/bench_classifier.py, README "Class layer memory")
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


def _target_mask(labels: Tensor, start: int, stop: int) -> Tensor:
    """``[B, stop - start]``: True at each row's own class (labels -1 match nothing)."""
    return labels[:, None] == torch.arange(start, stop, device=labels.device)[None, :]


def _finite_or_zero(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


class _NonTargetLSE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, labels: Tensor, fn: Callable[[Tensor], Tensor],  # type: ignore[override]
                k: int, chunk: int, normalize: bool) -> Tensor:
        num = weight.shape[0] // k
        run_max = torch.full((x.shape[0],), -float("inf"), dtype=x.dtype, device=x.device)
        run_sum = torch.zeros_like(run_max)
        for start in range(0, num, chunk):
            stop = min(start + chunk, num)
            z = fn(chunk_cosines(x, weight[start * k: stop * k], normalize, k))
            z = z.masked_fill_(_target_mask(labels, start, stop), -float("inf"))
            new_max = torch.maximum(run_max, z.amax(dim=1))
            shift = _finite_or_zero(new_max)
            run_sum = run_sum * torch.exp(run_max - shift) + torch.exp(z.sub_(shift[:, None])).sum(dim=1)
            run_max = new_max
        lse = _finite_or_zero(run_max) + torch.log(run_sum)  # -inf for a row with no non-target class
        ctx.fn, ctx.k, ctx.chunk, ctx.normalize = fn, k, chunk, normalize
        ctx.save_for_backward(x, weight, labels, lse)
        return lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight, labels, lse = ctx.saved_tensors
        k, chunk, fn = ctx.k, ctx.chunk, ctx.fn
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        finite = torch.isfinite(lse)
        coef = torch.where(finite, grad, torch.zeros_like(grad))[:, None]
        lse = torch.where(finite, lse, torch.zeros_like(lse))[:, None]
        grad_x = torch.zeros_like(x) if need_x else None
        grad_w = torch.zeros_like(weight) if need_w else None
        num = weight.shape[0] // k
        with torch.enable_grad(), torch.autocast(device_type=x.device.type, enabled=False):
            for start in range(0, num, chunk):
                stop = min(start + chunk, num)
                xl = x.detach().requires_grad_(need_x)
                wl = weight[start * k: stop * k].detach().requires_grad_(need_w)
                z = fn(chunk_cosines(xl, wl, ctx.normalize, k))
                # dLSE/dz = softmax over the non-target columns; zero at the target
                p = torch.exp(z.detach().masked_fill(_target_mask(labels, start, stop), -float("inf")) - lse)
                leaves = [t for t in (xl, wl) if t.requires_grad]
                grads = torch.autograd.grad(z, leaves, p.mul_(coef))
                if need_x:
                    grad_x += grads[0]
                if need_w:
                    grad_w[start * k: stop * k] = grads[-1]
        return grad_x, grad_w, None, None, None, None, None


def nontarget_lse(x: Tensor, weight: Tensor, labels: Tensor, fn: Callable[[Tensor], Tensor], k: int = 1,
                  chunk: int = DEFAULT_CHUNK_SIZE, normalize: bool = True) -> Tensor:
    """``[B]``: ``log Σ_{j ≠ labels_i} exp(fn(cos_ij))`` over the classes of ``weight`` ([C·K, D], raw rows).

    ``x``: the embeddings, already normalised when ``normalize``; ``labels``: column of each row's class
    in ``weight`` or -1 (then every class counts); ``fn``: elementwise map from cosines to logits.
    Differentiable in ``x`` and ``weight``.
    """
    return _NonTargetLSE.apply(x, weight, labels, fn, k, chunk, normalize)


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
