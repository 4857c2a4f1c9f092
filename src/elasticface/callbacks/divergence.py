"""Divergence is a failure: a non-finite loss or gradient stops the run before it reaches the weights.

Checked after backward and before the optimizer step (and before gradient clipping, which would
spread one NaN over every gradient), so the weights, the last checkpoint and summary.json never hold
NaN. `skip_budget` steps may instead be skipped (no parameter moves: every gradient is dropped) and
counted as `train/skipped_nonfinite_steps`. Under DDP the decision reads the all-reduced gradients,
so every rank decides the same.
"""

from __future__ import annotations

import logging
import math

import pytorch_lightning as pl
import torch
from torch import Tensor

log = logging.getLogger(__name__)


def nonfinite_weights(module: torch.nn.Module) -> list[str]:
    """Names of parameters and normalisation statistics holding NaN or inf (a NaN-by-design
    bookkeeping buffer such as `best_acc_mean` before the first validation is not a weight)."""
    named = list(module.named_parameters()) + [(n, b) for n, b in module.named_buffers() if "running_" in n]
    return [name for name, t in named if t.is_floating_point() and not bool(torch.isfinite(t).all())]


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


class DivergenceGuard(pl.Callback):
    def __init__(self, skip_budget: int = 0) -> None:
        if skip_budget < 0:
            raise ValueError(f"train.skip_nonfinite_steps={skip_budget}: must be >= 0")
        self.skip_budget = int(skip_budget)
        self.skipped = 0
        self._loss: Tensor | None = None

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        self._loss = loss.detach()

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        # fp16 AMP: an overflowing gradient is routine, and the GradScaler skips that step itself
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        grads = {} if scaler is not None else {
            name: p.grad for name, p in pl_module.named_parameters() if p.grad is not None}
        norms = torch._foreach_norm(list(grads.values())) if grads else []
        loss = self._loss if self._loss is not None else torch.zeros(())
        checks = torch.stack([loss.float().reshape(()).to(loss.device)] +
                             [n.float().to(loss.device) for n in norms])
        if bool(torch.isfinite(checks).all()):  # one host sync per step
            return
        step = trainer.global_step
        loss_value = float(loss)
        bad = [name for name, n in zip(grads, norms) if not math.isfinite(float(n))]
        what = []
        if not math.isfinite(loss_value):
            what.append(f"loss = {loss_value}")
        if bad:
            shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
            what.append(f"non-finite gradient in {len(bad)} of {len(grads)} parameters ({shown})")
        message = f"training diverged at step {step} (epoch {trainer.current_epoch}): " + "; ".join(what)
        if self.skipped < self.skip_budget:
            self.skipped += 1
            optimizer.zero_grad(set_to_none=True)  # optimizers leave parameters without a gradient alone
            broken = nonfinite_weights(pl_module)
            if broken:  # e.g. BatchNorm statistics of a NaN batch: skipping cannot undo the forward pass
                raise TrainingDiverged(f"{message}; the forward pass already made buffers non-finite "
                                       f"({', '.join(broken[:3])}), so the step cannot be skipped")
            log.warning(
                "%s; step skipped (%d of train.skip_nonfinite_steps=%d)", message, self.skipped, self.skip_budget
            )
            pl_module.log("train/skipped_nonfinite_steps", float(self.skipped), on_step=True)
            return
        budget = (
            f"the {self.skip_budget} skippable steps (train.skip_nonfinite_steps) are used up"
            if self.skip_budget
            else "set train.skip_nonfinite_steps=N to skip up to N such steps"
        )
        raise TrainingDiverged(
            f"{message}. The weights were not updated; the last checkpoint holds finite weights. "
            f"Lower optimizer.lr, keep model.clip_grad_norm, check the data; {budget}."
        )

    def state_dict(self) -> dict[str, int]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
