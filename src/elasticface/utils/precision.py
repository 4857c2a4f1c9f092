"""`trainer.precision=16-mixed` on a CPU: float16 autocast with a gradient scaler, as on a V100 or T4.

Lightning 2.6 turns `16-mixed` on a CPU into `bf16-mixed` (with a warning), so the fp16 path a V100/T4 user runs
(float16 activations, a GradScaler that skips overflowing steps) was never exercised off a GPU. torch >= 2.3
has `torch.amp.GradScaler("cpu")` and float16 CPU autocast, so the same path runs here: Lightning's
`MixedPrecision("16-mixed", "cpu", scaler)` plugin, given explicitly instead of the `precision` flag.
"""

from __future__ import annotations

import torch
from pytorch_lightning.plugins.precision import MixedPrecision

FP16_MIXED = ("16-mixed", "16")


def trains_on_cpu(accelerator: object) -> bool:
    """Whether `trainer.accelerator` puts the run on the CPU (auto: no CUDA device here)."""
    value = str(accelerator).lower()
    return value == "cpu" or (value == "auto" and not torch.cuda.is_available())


def cpu_fp16_plugin(precision: object, accelerator: object) -> MixedPrecision | None:
    """The fp16 mixed-precision plugin for a CPU run asking for `16-mixed`, else None (Lightning's own choice)."""
    if str(precision) not in FP16_MIXED or not trains_on_cpu(accelerator):
        return None
    return MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
