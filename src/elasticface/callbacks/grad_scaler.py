"""fp16 training's gradient scaler, made visible: its scale and the steps it skipped, as logged metrics.

Under `trainer.precision=16-mixed` a GradScaler multiplies the loss so that small fp16 gradients do not
underflow; when a gradient overflows it skips the optimizer step and halves the scale. A few skipped steps
at the start are routine; a scale that keeps falling (or many skips) is the "fp16 scale collapse" users report,
which this shows as `train/amp_skipped_steps` and `train/amp_scale`. A skip is detected on the device (the
scale fell across `scaler.update()`), so counting adds no host synchronisation to the step.

A fused optimizer (`optimizer.fused=true`) unscales inside its step and skips through `found_inf`; fused SGD
then leaves the momentum buffers it allocated on a skipped first step uninitialised, and the first step that
is taken reads them: NaN weights after the routine skips at the start of every fp16 run. The buffers are
zeroed before the first step, which is exactly SGD's first step (`divergence.zero_momentum`).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from elasticface.callbacks.divergence import zero_momentum
from elasticface.utils.lightning_private import should_update_logs


def _scale(scaler: torch.amp.GradScaler) -> Tensor | None:
    """The scaler's current scale as a device tensor (`get_scale()` would synchronise with the host)."""
    scale = getattr(scaler, "_scale", None)  # torch keeps it private; None before the first scaled backward
    return scale.detach().clone() if isinstance(scale, Tensor) else None


class GradScalerMonitor(pl.Callback):
    """Counts the steps the GradScaler skipped and logs the count and the scale on the logging steps."""

    def __init__(self) -> None:
        self.skipped = 0
        self._skipped: Tensor | None = None  # on the device since the last read
        self._before: Tensor | None = None
        self._momentum_ready = False

    @staticmethod
    def scaler(trainer: pl.Trainer) -> torch.amp.GradScaler | None:
        return getattr(trainer.precision_plugin, "scaler", None)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        scaler = self.scaler(trainer)
        self._before = _scale(scaler) if scaler is not None else None
        if scaler is not None and not self._momentum_ready:
            zero_momentum(getattr(optimizer, "_optimizer", optimizer))  # a LightningOptimizer wraps the torch one
            self._momentum_ready = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        scaler = self.scaler(trainer)
        if scaler is None:
            return
        after = _scale(scaler)
        if self._before is not None and after is not None:  # an optimizer step ran in this batch
            fell = (after < self._before).to(torch.int64)
            self._skipped = fell if self._skipped is None else self._skipped + fell
            self._before = None
        if should_update_logs(trainer) and after is not None:
            pl_module.log("train/amp_scale", after.float(), on_step=True)
            pl_module.log("train/amp_skipped_steps", float(self.total()), on_step=True)

    def total(self) -> int:
        """Skipped steps so far (reads the device counter: one synchronisation, on logging steps only)."""
        if self._skipped is not None:
            self.skipped += int(self._skipped)
            self._skipped = None
        return self.skipped

    def state_dict(self) -> dict[str, int]:
        return {"skipped": self.total()}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
