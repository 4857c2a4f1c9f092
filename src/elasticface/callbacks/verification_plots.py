"""Pictures of what validation and training are doing: ROC curves, score and margin histograms.

At the end of a validation epoch, for every pair set in `pl_module.val_metrics`, an ROC figure and a
genuine/impostor histogram go to every logger that takes images (W&B, TensorBoard); CSV and other
loggers are skipped. Every `trainer.log_every_n_steps` training steps, the per-sample margins of the
head and the target angles θ_y (degrees), read from what the training step returns, are
logged as histograms. Under DDP every rank gathers the metric states (a collective), and only rank 0
draws and logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn

from elasticface.callbacks.step_statistics import last_margins

if TYPE_CHECKING:
    from elasticface.module import FaceRecognitionModule


def _is_wandb(logger: Any) -> bool:
    try:
        from pytorch_lightning.loggers import WandbLogger
    except ImportError:  # pragma: no cover - wandb extra missing
        return False
    return isinstance(logger, WandbLogger)


def _is_tensorboard(logger: Any) -> bool:
    from pytorch_lightning.loggers import TensorBoardLogger

    return isinstance(logger, TensorBoardLogger)


def log_figure(logger: Any, key: str, figure: Any, step: int) -> bool:
    """Send a matplotlib figure to one logger; False if it takes no images."""
    if _is_wandb(logger):
        import wandb

        logger.log_image(key=key, images=[wandb.Image(figure)], step=step)
        return True
    if _is_tensorboard(logger):
        logger.experiment.add_figure(key, figure, global_step=step, close=False)
        return True
    return False


def log_histogram(logger: Any, key: str, values: np.ndarray, step: int) -> bool:
    """Send a histogram of `values` to one logger; False if it takes no histograms."""
    if _is_wandb(logger):
        import wandb

        logger.log_metrics({key: wandb.Histogram(values)}, step=step)
        return True
    if _is_tensorboard(logger):
        logger.experiment.add_histogram(key, values, global_step=step)
        return True
    return False


def _as_numpy(values: Any) -> np.ndarray | None:
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        values = values.detach().float().cpu().numpy()
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    return values if values.size else None


class VerificationPlots(pl.Callback):
    """ROC curves and score histograms per validation set every `every_n_val` validations; margin and
    θ_y histograms every `log_every_n_steps` training steps (default: the trainer's)."""

    def __init__(self, every_n_val: int = 1, log_every_n_steps: int | None = None, histograms: bool = True) -> None:
        if every_n_val < 1:
            raise ValueError(f"every_n_val must be >= 1, got {every_n_val}")
        self.every_n_val = every_n_val
        self.log_every_n_steps = log_every_n_steps
        self.histograms = histograms
        self._validations = 0

    @staticmethod
    def _image_loggers(trainer: pl.Trainer) -> list[Any]:
        return [lg for lg in trainer.loggers if _is_wandb(lg) or _is_tensorboard(lg)]

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._validations += 1
        metrics = getattr(pl_module, "val_metrics", None)
        if not metrics or (self._validations - 1) % self.every_n_val:
            return
        if not self._image_loggers(trainer):
            return  # loggers are the same on every rank, so no rank enters the collective below
        from elasticface.eval.plots import roc_figure, score_histogram

        step = trainer.global_step
        curves = {}
        for name, metric in metrics.items():
            try:
                curves[name] = metric.roc_data()  # all ranks: gathers the states under DDP
            except (RuntimeError, ValueError) as err:
                rank_zero_warn(f"VerificationPlots: no curves for '{name}': {err}")
        if not trainer.is_global_zero or not curves:
            return
        import matplotlib.pyplot as plt

        figures = {f"val/{name}/roc": roc_figure({name: (c["fpr"], c["tpr"])}, title=f"{name} ROC (step {step})")
                   for name, c in curves.items()}
        for name, c in curves.items():
            figures[f"val/{name}/scores"] = score_histogram(
                c["genuine"], c["impostor"], title=f"{name} pair scores (acc {c['acc']:.4f}, step {step})")
        if len(curves) > 1:
            figures["val/roc"] = roc_figure(
                {n: (c["fpr"], c["tpr"]) for n, c in curves.items()}, title=f"ROC (step {step})"
            )
        for key, fig in figures.items():
            for logger in self._image_loggers(trainer):
                log_figure(logger, key, fig, step)
            plt.close(fig)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: FaceRecognitionModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.histograms or not trainer.is_global_zero:
            return
        every = self.log_every_n_steps or trainer.log_every_n_steps
        step = trainer.global_step
        if every <= 0 or step % every:
            return
        loggers = self._image_loggers(trainer)
        if not loggers:
            return
        out = outputs.get("classifier") if isinstance(outputs, dict) else None
        if out is None:  # a batch the module skipped
            return
        margins = _as_numpy(last_margins(out))
        theta = _as_numpy(out.theta_y[out.valid] if pl_module.head.normalized else None)
        for logger in loggers:
            if margins is not None:
                log_histogram(logger, "train/margins", margins, step)
            if theta is not None:
                log_histogram(logger, "train/theta_y_deg", np.degrees(theta), step)
