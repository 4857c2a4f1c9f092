"""AdaCos (Zhang et al. 2019): no margin, the scale is set from the data instead of tuned.

Fixed: ``s = sqrt(2)·log(C - 1)``. Dynamic (default): every training step
``s ← log(B_avg) / cos(min(π/4, θ_med))``, with ``B_avg`` the mean over valid rows of
``Σ_{j≠y} exp(s_old·cos θ_j)`` and ``θ_med`` the median target angle. The current scale is the
``scale`` buffer (NaN until the first step sets the fixed value), so it survives checkpoints.
Only training-mode calls update the scale. With the class centres sharded across ranks, ``B_avg``,
``θ_med`` and ``C`` are those of the global batch and all classes.

The dynamic scale needs ``B_avg``, a log-sum-exp over the non-target classes at the old scale, before
the logits at the new scale exist: the plan asks for it (``nontarget_lse``), which costs the chunked
classifier one extra no-grad pass over the classes (the benchmark prints its cost).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import MarginHead
from .functional import safe_acos
from .plan import HeadInputs, HeadPlan
from elasticface.utils.errors import BadValue


def fixed_scale(num_classes: int) -> float:
    """AdaCos's fixed scale ``sqrt(2)·log(C - 1)``."""
    if num_classes < 3:
        raise BadValue(f"num_classes={num_classes}: AdaCos needs >= 3 classes")
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

    def _current(self, num_columns: int, like: Tensor) -> Tensor:
        """The scale before this step: the buffer, or the fixed value until a step has set it."""
        fixed = fixed_scale(self.num_classes or num_columns)
        if not self.dynamic:
            return torch.tensor(fixed, dtype=like.dtype, device=like.device)
        cur = self.scale.to(like.dtype)
        return torch.where(torch.isnan(cur), torch.full_like(cur, fixed), cur)

    def eval_logits(self, cos: Tensor) -> Tensor:
        return cos * self._current(cos.shape[1], cos)

    def train_plan(self, batch: HeadInputs) -> HeadPlan:
        cos_y, valid = batch.cos_y, batch.valid
        s_old = self._current(batch.num_columns, cos_y)
        if not self.dynamic or not self.training:
            return HeadPlan(cos_y * s_old, lambda c: c * s_old, s_old)
        if batch.nontarget_lse is None:
            raise BadValue("AdaCos(dynamic=True) needs nontarget_lse: its scale reads every non-target logit")
        with torch.no_grad():
            c = cos_y.detach()
            log_nt = batch.nontarget_lse(lambda x: x * s_old, s_old)
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
