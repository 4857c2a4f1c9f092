"""Lightning's WandbLogger, plus the summaries a sweep dashboard sorts by, one run per job, and a line saying
which mode (online at which server, offline, disabled) the run got and why."""

from __future__ import annotations

import sys
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from pytorch_lightning.loggers import WandbLogger as LightningWandbLogger
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_info

from elasticface.utils.wandb_mode import wandb_choice

# W&B keeps the last value of a metric as its summary; a sweep is compared on the best one.
SUMMARY_MAX = ("val/acc_mean",)


class WandbLogger(LightningWandbLogger):
    """Summarises `val/acc_mean` as its maximum (the run table and parallel-coordinates plots sort by it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choice = wandb_choice()
        mode = kwargs.get("mode") or ("offline" if kwargs.get("offline") else None)
        if mode is None or mode == choice.mode:
            rank_zero_info(choice.describe())
        else:
            rank_zero_info(f"W&B {mode} (logger.wandb.mode={mode} in the config; without it: {choice.describe()})")

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        created = self._experiment is None
        run = super().experiment
        if created and callable(getattr(run, "define_metric", None)):
            for key in SUMMARY_MAX:
                # the step axis again: a metric defined by name no longer follows Lightning's "*" glob
                run.define_metric(key, step_metric="trainer/global_step", step_sync=True, summary="max")
        return run


class FinishWandbRun(Callback):
    """Hydra callback: finish the W&B run when a job ends (configs/hydra/default.yaml).

    Lightning's WandbLogger never finishes its run, and the next job of a multirun, in the same process,
    would then reuse it: every job of a sweep logged into the first job's run. Finishing here also
    flushes the last history rows and the summary to disk.
    """

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        wandb = sys.modules.get("wandb")  # never import it just to find that no run exists
        if wandb is not None and wandb.run is not None:
            wandb.run.finish(exit_code=0 if job_return.status == JobStatus.COMPLETED else 1)
