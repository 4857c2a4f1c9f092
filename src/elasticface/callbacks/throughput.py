"""Training throughput in images/s: wall time between consecutive training batches, validation excluded.

Timing from one batch's end to the next counts data loading too, which is what a run really sustains,
and needs no device synchronisation: with asynchronous GPU kernels a batch's own start-to-end time is
only its launch time, while the spacing of batch ends settles to the true step time.

The first training batch of a process is its own figure (`first_step_seconds`: torch.compile's compilation and
cuDNN's autotuning happen there, minutes on a GPU), not part of images/s; every later one counts, the first after
a validation too (a backbone recompiled, or fallen back to eager, after validation shows there). Each epoch's own
images/s is kept as well (summary.json's `images_per_second_per_epoch`).
"""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl

from elasticface.utils.lightning_private import log_step_metrics, should_update_logs


class Throughput(pl.Callback):
    def __init__(self) -> None:
        self.images = 0
        self.seconds = 0.0
        self._window_images = 0
        self._window_seconds = 0.0
        self._last_end: float | None = None
        self.first_step_seconds: float | None = None
        self.per_epoch: list[float] = []
        self._epoch_images = 0
        self._epoch_seconds = 0.0

    def restart_clock(self, *args: Any) -> None:
        """The next batch starts a new interval (after validation, at each epoch's first batch)."""
        self._last_end = None

    on_validation_end = restart_clock

    def on_train_epoch_start(self, *args: Any) -> None:
        self.restart_clock()
        self._epoch_images, self._epoch_seconds = 0, 0.0

    def on_train_epoch_end(self, *args: Any) -> None:
        if self._epoch_seconds > 0:
            self.per_epoch.append(self._epoch_images / self._epoch_seconds)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._last_end is None:
            self._last_end = time.perf_counter()  # the first batch of an interval counts from its own start

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = time.perf_counter()
        elapsed = now - (self._last_end if self._last_end is not None else now)
        self._last_end = now
        if self.first_step_seconds is None:  # compilation and autotuning: reported apart
            self.first_step_seconds = elapsed
            return
        count = int(batch[0].shape[0]) * trainer.world_size
        self.images += count
        self.seconds += elapsed
        self._window_images += count
        self._window_seconds += elapsed
        self._epoch_images += count
        self._epoch_seconds += elapsed
        if should_update_logs(trainer) and self._window_seconds > 0:  # as the step statistics, without self.log
            log_step_metrics(trainer, {"train/images_per_second": self._window_images / self._window_seconds})
            self._window_images, self._window_seconds = 0, 0.0

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0
