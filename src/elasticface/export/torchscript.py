"""TorchScript export of an embedding model: a trace, reloaded and checked against PyTorch."""

from __future__ import annotations

import os
import warnings
from typing import Sequence

import torch
from torch import nn

from elasticface.export.check import check_difference, cpu_eval_copy, example_input, scaled_difference


def export_torchscript(
    model: nn.Module,
    path: str,
    check: bool = True,
    image_size: int = 112,
    atol: float = 1e-4,
    check_batch_sizes: Sequence[int] = (1, 3),
) -> float:
    """Trace `model` with torch.jit.trace and save it; returns the max abs difference of the reloaded trace."""
    model = cpu_eval_copy(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated", category=FutureWarning)
        traced = torch.jit.trace(model, (example_input(2, image_size, 0),), check_trace=False)
        traced.save(path)
        if not check:
            return 0.0
        loaded = torch.jit.load(path, map_location="cpu").eval()
    diff = 0.0
    for i, batch in enumerate(check_batch_sizes):
        x = example_input(batch, image_size, 1 + i)
        with torch.no_grad():
            diff = max(diff, scaled_difference(loaded(x).numpy(), model(x).numpy()))
    return check_difference(path, diff, atol)
