"""What the model must beat, scored on its own pairs when fitting starts (global rank 0, after the run's overview):
raw pixels, eigenfaces fitted on the training faces, and for a fine-tune the loaded weights before the first step.

Each pass says what it does, how far it is and how long it took (utils/progress.py), so minutes of embedding never
pass in silence. The scores are kept in the checkpoint: a resumed run reports those of its start (its weights are
the checkpoint's by the time fitting starts, no longer the loaded file's).
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl

from elasticface.eval.baselines import (EIGENFACE_MAX_IMAGES, eigenface_accuracy, fit_eigenfaces, pixel_baseline,
                                       start_weights_baseline)
from elasticface.utils.progress import Progress
from elasticface.utils.speed import eagerly

log = logging.getLogger(__name__)

#: summary.json's baselines: raw pixels, eigenfaces, the loaded weights before training
KINDS = ("pixel", "eigenface", "start")


class Baselines(pl.Callback):
    """`pixel`, `eigenface`, `start`: which baselines to score; `scores[kind][set]` holds the accuracies."""

    def __init__(self, pixel: bool = True, eigenface: bool = False, start: bool = False) -> None:
        self.wanted = {"pixel": pixel, "eigenface": eigenface, "start": start}
        self.scores: dict[str, dict[str, float]] = {}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        val_sets = getattr(datamodule, "val_sets", None) or {}
        if not trainer.is_global_zero or not val_sets:
            return
        resumed = trainer.ckpt_path is not None
        for kind in KINDS:
            if not self.wanted[kind] or kind in self.scores:
                continue
            if kind == "start" and resumed:  # the backbone holds the checkpoint's weights now, not the file's
                log.info("baseline start: not scored, the run resumes (the checkpoint holds no start scores)")
                continue
            self.scores[kind] = self._score(kind, datamodule, val_sets, pl_module)
        if self.scores:
            log.info("baselines (%s) computed on global rank %d", ", ".join(self.scores), trainer.global_rank)

    def _score(self, kind: str, datamodule: Any, val_sets: dict[str, Any], pl_module: pl.LightningModule
               ) -> dict[str, float]:
        eigenfaces = None
        if kind == "eigenface":
            images = min(len(datamodule.train_set), EIGENFACE_MAX_IMAGES)
            with Progress("baseline eigenface: fitting the PCA of the training faces", images) as fitting:
                eigenfaces = fit_eigenfaces(datamodule.train_set, progress=fitting.advance)
                fitting.done()
        scores = {}
        for name, pairs in val_sets.items():
            flip = kind == "start" and bool(pl_module.hparams.get("val_flip", True))
            what = {"pixel": "raw pixels", "eigenface": "eigenfaces",
                    "start": "the loaded weights" + (" with flip" if flip else "")}[kind]
            with Progress(f"baseline {kind}: {what} on {name}", len(pairs.distinct_images())) as progress:
                if kind == "pixel":
                    scores[name] = pixel_baseline(pairs, progress=progress.advance)
                elif kind == "eigenface":
                    scores[name] = eigenface_accuracy(eigenfaces, pairs, progress=progress.advance)
                else:
                    with eagerly():  # as the loaded weights are, not as a compiled graph rounds them
                        scores[name] = start_weights_baseline(pl_module.backbone, pairs, flip,
                                                              progress=progress.advance)
                progress.done(f"accuracy {100 * scores[name]:.2f}%")
        return scores

    def state_dict(self) -> dict[str, Any]:
        return {"scores": self.scores}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scores = dict(state_dict.get("scores") or {})
