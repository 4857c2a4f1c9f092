"""The checkpoint callbacks' state keys: built once per settings, equal to the keys Lightning builds.

Lightning reads every callback's `state_key` at each hook it dispatches (its profiler label) and files the
callback's state under it in a checkpoint, so the cached key must equal the one Lightning would build.
"""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.demos.boring_classes import BoringModel

from elasticface.checkpointing.best_checkpoint import BestCheckpoint
from elasticface.checkpointing.run_checkpoint import RunCheckpoint


def test_the_best_checkpoint_files_its_state_under_model_checkpoints_key(tmp_path):
    """A checkpoint written by a plain ModelCheckpoint (earlier versions' config) resumes into BestCheckpoint."""
    settings = dict(dirpath=tmp_path, monitor="val/acc_mean", mode="max", save_top_k=1)
    best, plain = BestCheckpoint(**settings), ModelCheckpoint(**settings)
    assert best.state_key == plain.state_key
    assert best.state_key.startswith("ModelCheckpoint{")
    best.monitor = plain.monitor = "val/lfw"  # a setting changed: the key follows
    assert best.state_key == plain.state_key and "val/lfw" in best.state_key


def test_the_run_checkpoint_key_is_lightnings_rule_applied_to_its_settings(tmp_path):
    # Lightning's Callback._generate_state_key: the class's qualified name, then the repr of the settings
    assert RunCheckpoint(dirpath=tmp_path, every_n_steps=7).state_key == \
        "RunCheckpoint" + repr({"kind": "run", "every_n_train_steps": 7})


class CountingBest(BestCheckpoint):
    built = 0

    def fresh_state_key(self) -> str:
        CountingBest.built += 1
        return super().fresh_state_key()


class CountingRun(RunCheckpoint):
    built = 0

    def fresh_state_key(self) -> str:
        CountingRun.built += 1
        return super().fresh_state_key()


class LoggedLoss(BoringModel):
    def validation_step(self, batch, batch_idx):
        out = super().validation_step(batch, batch_idx)
        self.log("valid_loss", out["x"])
        return out


def test_a_fit_builds_each_key_a_few_times_not_at_every_hook(tmp_path):
    best = CountingBest(dirpath=tmp_path / "best", monitor="valid_loss", mode="min")
    run = CountingRun(dirpath=tmp_path / "run", every_n_steps=10)
    trainer = pl.Trainer(max_steps=40, limit_val_batches=2, val_check_interval=20, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                         callbacks=[best, run])
    trainer.fit(LoggedLoss())
    assert run.state_key == "CountingRun" + repr({"kind": "run", "every_n_train_steps": 10})
    # 40 steps dispatch ~6 hooks to each callback (~240 reads); a key is rebuilt only after its callback
    # changed an attribute (a setup, a save): fewer than one build a step
    assert 1 <= CountingBest.built < 40 and 1 <= CountingRun.built < 40, (CountingBest.built, CountingRun.built)
