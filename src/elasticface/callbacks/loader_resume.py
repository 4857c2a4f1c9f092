"""Put the checkpointed position of the training loader back when a run resumes mid-epoch.

Lightning 2.6 saves the `state_dict()` of a stateful training loader (FitLoop.on_save_checkpoint) and
loads it in `FitLoop.setup_data`, but only when the loader is built after the checkpoint is restored.
A module whose `configure_optimizers` reads `trainer.estimated_stepping_batches` (ours: the LR schedule
needs the total step count) builds the loader earlier, before the restore, so the saved position is
silently dropped and the resumed epoch starts again from its first batch (checked in
pytorch_lightning/loops/fit_loop.py: `setup_data` returns early once `_combined_loader` exists). This
callback applies the saved state at train start, after the restore: the sampler gets the checkpoint's
epoch first (its order depends on it), then the loader its position, then a fresh iterator is made.
"""

from __future__ import annotations

import pytorch_lightning as pl
from lightning_fabric.utilities.data import _set_sampler_epoch


class ResumeLoaderState(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loop = trainer.fit_loop
        if not loop._combined_loader_states_to_load or loop._combined_loader is None or not loop.restarting:
            return
        for loader in loop._combined_loader.flattened:
            _set_sampler_epoch(loader, loop.epoch_progress.current.processed)
        loop._load_combined_loader_states()
        iter(loop._data_fetcher)  # the iterator made before the restore started at batch 0
