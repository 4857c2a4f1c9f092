"""The best checkpoint by a monitored metric (configs/callbacks/default.yaml): Lightning's, its key built once."""

from __future__ import annotations

from pytorch_lightning.callbacks import ModelCheckpoint

from elasticface.checkpointing.state_key_once import StateKeyOnce


class BestCheckpoint(StateKeyOnce, ModelCheckpoint):
    """Lightning's ModelCheckpoint (the best file by `monitor`, configs/callbacks/default.yaml) under
    ModelCheckpoint's own state key, so a checkpoint written by a plain ModelCheckpoint resumes into it."""

    def fresh_state_key(self) -> str:
        key = super().fresh_state_key()
        return ModelCheckpoint.__qualname__ + key[len(type(self).__qualname__):]
