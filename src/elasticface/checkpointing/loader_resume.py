"""A run resumed mid-epoch continues at the checkpoint's batch, not at the epoch's first batch."""

from __future__ import annotations

import pytorch_lightning as pl

from elasticface.utils.lightning_private import restore_loader_position


class ResumeLoaderState(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the checkpoint is restored: Lightning's own restore of the loader came too late (see there)
        restore_loader_position(trainer)
