"""What every export is held to: the written model gives PyTorch's outputs on random inputs, within a tolerance."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn


class ExportMismatchError(RuntimeError):
    """The exported model's outputs differ from PyTorch's by more than the tolerance."""


def example_input(batch: int, image_size: int, seed: int) -> torch.Tensor:
    """Seeded random images in the model's input range [-1, 1]."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 3, image_size, image_size, generator=g) * 2 - 1


def scaled_difference(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute difference, in units of the output's scale when that is above 1: float error grows
    with the magnitude, and an untrained (or MXNet-converted) network's raw embeddings can be in the thousands."""
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))


def check_difference(name: str, diff: float, atol: float) -> float:
    """`diff`, or ExportMismatchError naming the file when it is above `atol` (or not finite)."""
    if not np.isfinite(diff) or diff > atol:
        raise ExportMismatchError(f"{name}: max difference {diff:.3g} to the PyTorch model (absolute, relative to "
                                  f"the output's scale above 1) exceeds atol={atol:g}")
    return diff


def cpu_eval_copy(model: nn.Module) -> nn.Module:
    """What the exporters trace: a copy, so the caller's model keeps its device and mode."""
    return copy.deepcopy(model).cpu().eval()
