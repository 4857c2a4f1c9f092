"""Resumable checkpoints: `last.ckpt` is always the newest state, plus the newest few every N steps."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from elasticface.checkpointing.atomic_save import remove_stale_temporaries
from elasticface.checkpointing.state_key_once import StateKeyOnce
from elasticface.utils.lightning_private import checkpoint_state_key, every_n_train_steps, save_checkpoint_now
from elasticface.utils.errors import BadValue


# Why not ModelCheckpoint(monitor="val/acc_mean", save_last=True) (Lightning 2.6): it writes last.ckpt only
# when a new best is saved, so last.ckpt can be epochs old and nothing is written between validations.
# This one monitors the step (the newest `keep` files are the "top k"), saves every `every_n_steps`
# optimizer steps and at the end of every run. The best-by-val/acc_mean file is kept by BestCheckpoint
# (checkpointing/best_checkpoint.py, configs/callbacks/default.yaml).
class RunCheckpoint(StateKeyOnce, ModelCheckpoint):
    def __init__(self, dirpath: str, every_n_steps: int = 1000, keep: int = 3,
                 filename: str = "step{step:07d}", **kwargs: Any) -> None:
        if every_n_steps < 1:
            raise BadValue(f"checkpoint.every_n_steps={every_n_steps}: must be >= 1")
        if keep < 1:
            raise BadValue(f"checkpoint.keep={keep}: must be >= 1 (the newest resumable checkpoints kept)")
        super().__init__(dirpath=dirpath, filename=filename, monitor="step", mode="max", save_top_k=keep,
                         save_last=True, every_n_train_steps=every_n_steps, auto_insert_metric_name=False,
                         save_on_train_epoch_end=False, **kwargs)

    def fresh_state_key(self) -> str:
        return checkpoint_state_key(self, kind="run", every_n_train_steps=every_n_train_steps(self))

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if trainer.is_global_zero and self.dirpath:
            remove_stale_temporaries(self.dirpath)

    def save_now(self, trainer: pl.Trainer) -> None:
        """Write the step's checkpoint and `last.ckpt` now, unless this step is saved already."""
        save_checkpoint_now(self, trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save_now(trainer)
