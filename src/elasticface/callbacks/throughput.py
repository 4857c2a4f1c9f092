"""Training throughput in images/s, counted over training batches only (validation time excluded)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl


class Throughput(pl.Callback):
    def __init__(self, log_every_n_steps: int = 10) -> None:
        self.log_every_n_steps = log_every_n_steps
        self.images = 0
        self.seconds = 0.0
        self._window_images = 0
        self._window_seconds = 0.0
        self._batch_start = 0.0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        self._batch_start = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        elapsed = time.perf_counter() - self._batch_start
        count = int(batch[0].shape[0]) * trainer.world_size
        self.images += count
        self.seconds += elapsed
        self._window_images += count
        self._window_seconds += elapsed
        if trainer.global_step % self.log_every_n_steps == 0 and self._window_seconds > 0:
            pl_module.log("train/images_per_second", self._window_images / self._window_seconds, on_step=True)
            self._window_images, self._window_seconds = 0, 0.0

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0
