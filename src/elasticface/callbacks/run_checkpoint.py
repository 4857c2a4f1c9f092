"""Resumable checkpoints: `last.ckpt` is always the newest state, plus the last few every N steps.

Lightning 2.6's `ModelCheckpoint(monitor="val/acc_mean", save_last=True)` writes `last.ckpt` only when a
new best is saved (`on_validation_end` saves "last" only if top-k saved at this step), so a run's
`last.ckpt` can be epochs old and nothing is written between validations. This callback monitors
the step instead (the newest `keep` files are the "top k"), saves every `every_n_steps` optimizer steps
and, unlike ModelCheckpoint, at the end of every run, so `last.ckpt` holds the final state. The
best-by-`val/acc_mean` file is kept by a separate plain ModelCheckpoint (configs/callbacks/default.yaml).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from elasticface.utils.checkpoint_io import remove_stale_temporaries


class RunCheckpoint(ModelCheckpoint):
    def __init__(self, dirpath: str, every_n_steps: int = 1000, keep: int = 3,
                 filename: str = "step{step:07d}", **kwargs: Any) -> None:
        if every_n_steps < 1:
            raise ValueError(f"checkpoint.every_n_steps={every_n_steps}: must be >= 1")
        if keep < 1:
            raise ValueError(f"checkpoint.keep={keep}: must be >= 1 (the newest resumable checkpoints kept)")
        super().__init__(dirpath=dirpath, filename=filename, monitor="step", mode="max", save_top_k=keep,
                         save_last=True, every_n_train_steps=every_n_steps, auto_insert_metric_name=False,
                         save_on_train_epoch_end=False, **kwargs)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(kind="run", every_n_train_steps=self._every_n_train_steps)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if trainer.is_global_zero and self.dirpath:
            remove_stale_temporaries(self.dirpath)

    def save_now(self, trainer: pl.Trainer) -> None:
        """Write the step's checkpoint and `last.ckpt` now, unless this step is saved already."""
        if self._should_skip_saving_checkpoint(trainer):
            return
        candidates = self._monitor_candidates(trainer)
        self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save_now(trainer)
