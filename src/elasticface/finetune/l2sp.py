"""L2-SP (Li, Grandvalet and Davoine, "Explicit Inductive Bias for Transfer Learning with Convolutional Networks",
2018): the backbone's weights are pulled toward the weights it started from, alpha/2 * ||w - w0||^2, instead of
toward zero by weight decay, so a small set can adapt them without wearing away what the released model knew.

The start weights are kept beside the backbone (buffers that follow it to the device but are not saved in
checkpoints: a resumed run takes them from `weights=` again).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

KEY = "model.l2sp_alpha"


class StartPoint(nn.Module):
    """The backbone's parameters as they were loaded, and the L2-SP penalty toward them."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.names = [name for name, p in backbone.named_parameters() if p.requires_grad]
        params = dict(backbone.named_parameters())
        for i, name in enumerate(self.names):
            self.register_buffer(f"w{i}", params[name].detach().clone(), persistent=False)

    def penalty(self, backbone: nn.Module, alpha: float) -> Tensor:
        """alpha/2 * sum over the backbone's parameters of ||w - w0||^2, in float32."""
        params = dict(backbone.named_parameters())
        total = torch.zeros((), device=getattr(self, "w0").device if self.names else None)
        for i, name in enumerate(self.names):
            total = total + (params[name].float() - getattr(self, f"w{i}").float()).pow(2).sum()
        return 0.5 * alpha * total
