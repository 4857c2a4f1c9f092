"""Make one training step's loss NaN, to exercise the divergence guard through the real Trainer."""

from __future__ import annotations

from elasticface.module import FaceRecognitionModule


def nan_loss_at_step(monkeypatch, bad_step: int) -> None:
    """From now on in this test, `FaceRecognitionModule.training_step` returns a NaN loss at global step `bad_step`."""
    step = FaceRecognitionModule.training_step

    def training_step(self, batch, batch_idx):
        out = step(self, batch, batch_idx)
        if self.global_step == bad_step:
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(FaceRecognitionModule, "training_step", training_step)
