"""L2-SP (Li, Grandvalet and Davoine, "Explicit Inductive Bias for Transfer Learning with Convolutional Networks",
2018): the backbone's weights are pulled toward the weights it started from, alpha/2 * ||w - w0||^2, instead of
toward zero by weight decay, so a small set can adapt them without wearing away what the released model knew.

The start weights are kept beside the backbone (not saved in checkpoints: a resumed run takes them from `weights=`
again). The pull is added to the backbone's gradients after each backward pass, alpha * (w - w0): the gradient of
the penalty, without a graph through it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

KEY = "finetune.l2sp_alpha"


class StartPoint(nn.Module):
    """The backbone's parameters as they were loaded, and the L2-SP penalty toward them."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.names = [name for name, p in backbone.named_parameters() if p.requires_grad]
        params = dict(backbone.named_parameters())
        for i, name in enumerate(self.names):
            self.register_buffer(f"w{i}", params[name].detach().clone(), persistent=False)

    @torch.no_grad()
    def pull(self, backbone: nn.Module, alpha: float, penalty: bool = False) -> Tensor | None:
        """Add alpha * (w - w0) to each parameter's gradient (the penalty's gradient); with `penalty`, return
        alpha/2 * sum of ||w - w0||^2 too, in float32."""
        params = dict(backbone.named_parameters())
        total = torch.zeros((), device=getattr(self, "w0").device if self.names else None) if penalty else None
        for i, name in enumerate(self.names):
            weight = params[name]
            difference = weight.float() - getattr(self, f"w{i}").float()
            pull = (difference * alpha).to(weight.dtype)
            if weight.grad is None:
                weight.grad = pull
            else:
                weight.grad.add_(pull)
            if total is not None:
                total = total + difference.pow(2).sum()
        return None if total is None else 0.5 * alpha * total
