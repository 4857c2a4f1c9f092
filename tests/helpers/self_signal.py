"""A callback that sends this process a signal after a given optimizer step: a scheduler's warning, on time."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytorch_lightning as pl


class SelfSignal(pl.Callback):
    def __init__(self, at_step: int, signum: str = "SIGUSR2") -> None:
        self.at_step = at_step
        self.signum = signal.Signals[signum]

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.at_step:
            os.kill(os.getpid(), self.signum)
