"""A sweep round's budget: stop after epoch N of the run's `trainer.max_epochs`, to continue later where it stopped.

Successive halving (sweeps/halving.py) trains every job of a sweep to a first budget, keeps the best and continues
them from their own checkpoints. The schedule (lr milestones, margin schedule, warm-up) stays the full run's, so a
job continued to `max_epochs` is the job that was never stopped: the budget ends the fit, it changes nothing in it.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl


class EpochBudget(pl.Callback):
    """`halving.stop_epoch`: the fit ends after this many epochs (counted from the run's start, resumes included)."""

    def __init__(self, stop_epoch: int) -> None:
        self.stop_epoch = int(stop_epoch)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if trainer.current_epoch + 1 >= self.stop_epoch:
            trainer.should_stop = True

    def stopped_early(self, trainer: pl.Trainer) -> bool:
        """Whether the budget, not `trainer.max_epochs`, ended this fit."""
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None else -1
        return trainer.current_epoch >= self.stop_epoch and (max_epochs < 0 or self.stop_epoch < max_epochs)
