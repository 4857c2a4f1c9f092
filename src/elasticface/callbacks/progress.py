"""Progress: Lightning's bar on a terminal, a plain log line every N steps anywhere else.

A progress bar written to a file (SLURM logs, `make train > log`, CI) is a stream of carriage returns
and escape codes; a line per N steps is what a cluster log should hold. A terminal that reports 0 columns
(some CI runners, `script`) gets the lines too: the bar draws nothing there.

Both read metric values only on the steps the loggers write (`trainer.log_every_n_steps`): reading a
value on a GPU waits for every queued kernel, which a step that does not log must never do.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar, TQDMProgressBar

from elasticface.utils.lightning_private import should_update_logs
from elasticface.utils.progress import Progress

log = logging.getLogger(__name__)


class LogProgress(ProgressBar):
    """One log line every `every_n_steps` training steps and one per validation."""

    def __init__(self, every_n_steps: int = 10) -> None:
        super().__init__()
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps={every_n_steps}: must be >= 1")
        self.every_n_steps = every_n_steps
        self._enabled = True
        self._total: int | None = None
        self._verifying: Progress | None = None

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = trainer.estimated_stepping_batches
        self._total = int(total) if total != float("inf") else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step
        if not self._enabled or not trainer.is_global_zero or step % self.every_n_steps:
            return
        total = f"/{self._total}" if self._total else ""
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        log.info(f"epoch {trainer.current_epoch + 1}{epochs}  step {step}{total}  {self._format(trainer, 'train/')}")

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation longer than a few seconds says how far it is (every tenth, at least every 30 s): embedding
        a benchmark's pairs on a CPU takes minutes."""
        if self._enabled and trainer.is_global_zero and not trainer.sanity_checking:
            batches = sum(int(n) for n in trainer.num_val_batches if n != float("inf"))
            self._verifying = Progress(f"verifying at step {trainer.global_step}", batches, unit="batches")

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any,
                                **kwargs: Any) -> None:
        if self._verifying is not None:
            self._verifying.advance(1)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._verifying is not None:
            self._verifying.stop()
            self._verifying = None
        if self._enabled and trainer.is_global_zero and not trainer.sanity_checking:
            log.info(f"validation at step {trainer.global_step}  {self._format(trainer, 'val/')}")

    @staticmethod
    def _format(trainer: pl.Trainer, prefix: str) -> str:
        """Scalar metrics under `prefix`; of validation only the accuracies (the rest is in the loggers)."""
        metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith(prefix) and v.numel() == 1
                   and (prefix != "val/" or k.endswith("/acc") or "acc_mean" in k)}
        return "  ".join(f"{k[len(prefix):]} {_shown(k, float(v))}" for k, v in sorted(metrics.items()))


def _shown(key: str, value: float) -> str:
    """An accuracy in percent, as the summary, the reports and the README give it; other values as numbers."""
    return f"{100 * value:.2f}%" if key.rsplit("/", 1)[-1].startswith("acc") else f"{value:.4g}"


class LoggingStepBar(TQDMProgressBar):
    """TQDM's bar; its numbers (the loss among them) change on logging steps only."""

    def __init__(self, refresh_rate: int = 10) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self._shown: dict[str, Any] | None = None

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        if trainer.training and not should_update_logs(trainer):
            return self._shown if self._shown is not None else super().get_metrics(trainer, pl_module)
        metrics = super().get_metrics(trainer, pl_module)
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and key.rsplit("/", 1)[-1].startswith("acc"):
                metrics[key] = _shown(key, float(value))
        loss = trainer.callback_metrics.get("train/loss") if trainer.training else None
        if loss is not None:
            metrics["loss"] = f"{float(loss):.4g}"
        self._shown = metrics
        return metrics


def bar_can_draw(stream: Any = None) -> bool:
    """Whether a progress bar can draw on `stream` (stdout): a terminal that reports a width."""
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):  # no file descriptor (a test's capture), or not a terminal
        return False


def progress_bar(refresh_rate: int = 10, log_every_n_steps: int = 10) -> ProgressBar:
    """TQDM's bar where it can draw on stdout, else a `LogProgress` line every `log_every_n_steps` steps."""
    if bar_can_draw():
        return LoggingStepBar(refresh_rate=refresh_rate)
    return LogProgress(every_n_steps=log_every_n_steps)
