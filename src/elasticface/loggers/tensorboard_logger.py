"""Lightning's TensorBoardLogger with the HPARAMS tab filled in.

TensorBoard shows hyperparameters only next to metric tags declared with them. Lightning declares
none unless it writes a placeholder `hp_metric` scalar (`default_hp_metric`), so the tab stayed empty.
This logger declares the real validation metrics instead, without writing any value for them: the
tab then reads `val/acc_mean` from the scalars the run logs anyway.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Sequence
from typing import Any

from pytorch_lightning.loggers import TensorBoardLogger as LightningTensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only

from elasticface.utils.lightning_private import flat_hyperparameters, tensorboard_file_writer


class TensorBoardLogger(LightningTensorBoardLogger):
    def __init__(self, *args: Any, hparams_metrics: Sequence[str] = ("val/acc_mean", "val/acc_mean_best"),
                 **kwargs: Any) -> None:
        kwargs.setdefault("default_hp_metric", False)
        super().__init__(*args, **kwargs)
        self.hparams_metrics = list(hparams_metrics)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, metrics: dict[str, Any] | None = None,
                        step: int | None = None) -> None:
        super().log_hyperparams(params, metrics=metrics, step=step)
        if metrics is not None or not self.hparams_metrics:
            return  # Lightning wrote the HPARAMS summary with the given metrics
        from torch.utils.tensorboard.summary import hparams

        flat = flat_hyperparameters(self, params)
        # the values are placeholders: TensorBoard only takes the tag names from them
        experiment, session_start, session_end = hparams(flat, {key: 0.0 for key in self.hparams_metrics})
        writer = tensorboard_file_writer(self)
        for summary in (experiment, session_start, session_end):
            writer.add_summary(summary, step)
