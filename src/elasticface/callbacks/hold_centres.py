"""Hold the class centres at their initial directions for the first optimizer steps (the toy example's recipe).

Why: in a 2-D embedding (`experiment=toy_2d`) random centres often leave a wide empty arc, and with s = 64
every sample pushes only its nearest wrong centre. A centre at the edge of that arc is pushed by all the
samples in it towards its neighbours, so in the first ~20 steps the centres pile onto one direction and the
embeddings onto one line, a state the loss never leaves (measured: 2 of 5 ArcFace seeds collapsed this way).
While the centres are held the backbone learns to put each identity near its own centre; released, the
centres only repel their neighbours and spread. Their gradients are zeroed, not removed, so the optimizer
state and the divergence guard see the same parameters at every step; weight decay on a held centre changes
its norm, never its direction.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch


class HoldClassCentres(pl.Callback):
    def __init__(self, steps: int) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"callbacks.hold_centres.steps={steps!r}: expected a whole number of steps >= 0")
        self.steps = steps

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if trainer.global_step >= self.steps:
            return
        for parameter in pl_module.centers.parameters():
            if parameter.grad is not None:
                parameter.grad.zero_()
