"""AdaCos (Zhang et al. 2019): no margin, the scale is set from the data instead of tuned.

Fixed: ``s = sqrt(2)·log(C - 1)``. Dynamic (default): every training step
``s ← log(B_avg) / cos(min(π/4, θ_med))``, with ``B_avg`` the mean over valid rows of
``Σ_{j≠y} exp(s_old·cos θ_j)`` and ``θ_med`` the median target angle. The current scale is the
``scale`` buffer (NaN until the first step sets the fixed value), so it survives checkpoints.
Only training-mode calls update the scale. With the class centres sharded across ranks, ``B_avg``,
``θ_med`` and ``C`` are those of the global batch and all classes.

Chunked (:meth:`AdaCos.plan`): the dynamic scale needs ``B_avg``, a log-sum-exp over the non-target
classes at the old scale, before the logits at the new scale exist; the classifier gives it one extra
no-grad pass over the classes (the benchmark prints its cost).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import HeadPlan, MarginHead
from .functional import batch_logsumexp, batch_num_columns, batch_target_cos, gather_target, safe_acos


def fixed_scale(num_classes: int) -> float:
    """AdaCos's fixed scale ``sqrt(2)·log(C - 1)``."""
    if num_classes < 3:
        raise ValueError(f"num_classes={num_classes}: AdaCos needs >= 3 classes")
    return math.sqrt(2.0) * math.log(num_classes - 1)


class AdaCos(MarginHead):
    """AdaCos with a fixed (``dynamic=False``) or per-step adaptive scale; ``num_classes=None`` means C."""

    scale: Tensor

    def __init__(self, *, num_classes: int | None, dynamic: bool) -> None:
        super().__init__(None)
        if num_classes is not None:
            fixed_scale(int(num_classes))
        self.num_classes = num_classes
        self.dynamic = bool(dynamic)
        self.chunked_by_default = not self.dynamic  # its scale costs a second pass: 1.16x the dense step
        self.register_buffer("scale", torch.tensor(float("nan")))

    def _current(self, cos: Tensor) -> Tensor:
        fixed = fixed_scale(self.num_classes or batch_num_columns(cos))
        if not self.dynamic:
            return torch.tensor(fixed, dtype=cos.dtype, device=cos.device)
        cur = self.scale.to(cos.dtype)
        return torch.where(torch.isnan(cur), torch.full_like(cur, fixed), cur)

    def eval_logits(self, cos: Tensor) -> Tensor:
        return cos * self._current(cos)

    def train_logits(self, cos: Tensor, labels: Tensor, norms: Tensor | None) -> Tensor:
        s_old = self._current(cos)
        if not self.dynamic or not self.training:
            return cos * s_old
        with torch.no_grad():
            cos_y, valid, _ = gather_target(cos, labels)
            cos_y, valid = batch_target_cos(cos_y, valid)
            lse = batch_logsumexp(cos * s_old)
            z_y = cos_y * s_old
            # log Σ_{j≠y} exp(z_j) = lse + log(1 - exp(z_y - lse)); -inf when the target dominates
            log_nt = lse + torch.log1p(-torch.exp((z_y - lse).clamp(max=0.0)).clamp(max=1.0 - 1e-12))
            log_nt = torch.where(valid, log_nt, torch.full_like(log_nt, -float("inf")))
            n = valid.sum().to(cos.dtype)
            log_b_avg = torch.logsumexp(log_nt, dim=0) - torch.log(n.clamp_min(1.0))
            theta = torch.where(valid, safe_acos(cos_y), torch.full_like(cos_y, float("nan")))
            theta_med = torch.nanmedian(theta).clamp(max=math.pi / 4)
            s_new = log_b_avg / torch.cos(theta_med)
            ok = torch.isfinite(s_new) & (s_new > 0) & (n > 0)
            s_new = torch.where(ok, s_new, s_old)
            self.scale.copy_(s_new.to(self.scale.dtype))
        return cos * s_new

    def train_plan(self, cos_y, valid, norms, num_columns, nontarget_lse) -> HeadPlan:
        fixed = fixed_scale(self.num_classes or num_columns)
        if not self.dynamic:
            s_old = torch.tensor(fixed, dtype=cos_y.dtype, device=cos_y.device)
        else:
            cur = self.scale.to(cos_y.dtype)
            s_old = torch.where(torch.isnan(cur), torch.full_like(cur, fixed), cur)
        if not self.dynamic or not self.training:
            return HeadPlan(cos_y * s_old, lambda c: c * s_old, s_old)
        if nontarget_lse is None:
            raise ValueError("AdaCos(dynamic=True) needs nontarget_lse: its scale reads every non-target logit")
        with torch.no_grad():
            c = cos_y.detach()
            log_nt = nontarget_lse(lambda x: x * s_old, s_old)
            log_nt = torch.where(valid, log_nt, torch.full_like(log_nt, -float("inf")))
            n = valid.sum().to(c.dtype)
            log_b_avg = torch.logsumexp(log_nt, dim=0) - torch.log(n.clamp_min(1.0))
            theta = torch.where(valid, safe_acos(c), torch.full_like(c, float("nan")))
            theta_med = torch.nanmedian(theta).clamp(max=math.pi / 4)
            s_new = log_b_avg / torch.cos(theta_med)
            ok = torch.isfinite(s_new) & (s_new > 0) & (n > 0)
            s_new = torch.where(ok, s_new, s_old)
            self.scale.copy_(s_new.to(self.scale.dtype))
        return HeadPlan(cos_y * s_new, lambda x: x * s_new, s_new)

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, dynamic={self.dynamic}"
