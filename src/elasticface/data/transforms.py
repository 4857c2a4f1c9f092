"""Batch transforms applied on the device after transfer: uint8 travels, floats are made where they are used.

The paper's only augmentation is a random horizontal flip; pixels go to [-1, 1] as (x/255 - 0.5)/0.5.
"""

from __future__ import annotations

import torch
from torch import Tensor


def normalize(images: Tensor) -> Tensor:
    """uint8 [B, 3, H, W] -> float32 (x/255 - 0.5)/0.5 in [-1, 1]."""
    if images.dtype != torch.uint8:
        raise TypeError(f"normalize expects uint8 images, got {images.dtype}")
    return images.float().div_(127.5).sub_(1.0)


def random_hflip(images: Tensor, p: float = 0.5, generator: torch.Generator | None = None) -> Tensor:
    """Flip each image of the batch horizontally with probability p (one draw per image)."""
    flip = torch.rand(images.shape[0], generator=generator).lt(p).to(images.device)
    return torch.where(flip[:, None, None, None], images.flip(-1), images)
