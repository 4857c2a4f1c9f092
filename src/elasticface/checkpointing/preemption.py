"""Preemption: the scheduler's warning signal becomes a checkpoint at a step boundary and a requeue.

The run then stops without summary.json; the requeued job continues with `resume=auto` (launcher=slurm
sets it) or by Lightning's own hpc-checkpoint pick-up.
"""

from __future__ import annotations

import logging
import os
import signal as signals
import subprocess
from types import FrameType
from typing import Any

import pytorch_lightning as pl

from elasticface.checkpointing.run_checkpoint import RunCheckpoint

log = logging.getLogger(__name__)


def slurm_job_id() -> str | None:
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None and "SLURM_ARRAY_TASK_ID" in os.environ:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


# SLURM sends a signal some time before the limit (`sbatch --signal=USR1@120`; submitit sends USR2).
# Lightning's SLURMEnvironment (auto_requeue) and submitit each install a handler that saves or requeues at
# whatever bytecode the signal interrupts, which can be half-way through an optimizer step. This callback
# wraps whatever handler is installed: the signal only sets a flag; at the end of the current step
# `last.ckpt` is written (through RunCheckpoint, so it is the exact resumable state), then the wrapped
# handler runs (Lightning's: hpc checkpoint + `scontrol requeue`; submitit's: requeue), or, under SLURM
# with no handler, `scontrol requeue $SLURM_JOB_ID` here.
class Preemption(pl.Callback):
    def __init__(self, signal: str | int | None = "SIGUSR1") -> None:
        if signal is None or signal == "":
            self.signum = None
        else:
            try:
                self.signum = signals.Signals[signal] if isinstance(signal, str) else signals.Signals(int(signal))
            except (KeyError, ValueError):
                raise ValueError(f"checkpoint.preemption_signal={signal!r}: expected a signal name such as "
                                 "SIGUSR1 or SIGUSR2, or null") from None
        self.requested = False
        self.preempted = False
        self._at_epoch_end = False
        self._wrapped: Any = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.signum is None:
            return
        self._wrapped = signals.getsignal(self.signum)
        signals.signal(self.signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        requested = self.requested
        if trainer.world_size > 1:  # every rank stops at the same step, or DDP hangs
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if requested and not self.preempted and not self._at_epoch_end:
            if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
                # a checkpoint from an epoch's last batch, before its validation and end, resumes one epoch late
                # (Lightning 2.6; SLURM's signal found it): written after them, where Lightning writes its own
                self._at_epoch_end = True
            else:
                self.preempt(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._at_epoch_end and not self.preempted and not trainer.sanity_checking:
            self.preempt(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._at_epoch_end and not self.preempted:  # an epoch without validation
            self.preempt(trainer)

    def preempt(self, trainer: pl.Trainer) -> None:
        self.preempted = True
        step = trainer.global_step
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, RunCheckpoint):
                callback.save_now(trainer)
                log.warning("preemption signal %s: checkpoint of step %d written to %s", self.signum.name, step,
                            callback.last_model_path)
        wrapped = self._wrapped
        if callable(wrapped):
            wrapped(self.signum, None)
        elif trainer.is_global_zero and (job := slurm_job_id()) is not None:
            result = subprocess.call(["scontrol", "requeue", job])
            log.warning("requeued SLURM job %s" if result == 0 else "requeueing SLURM job %s failed (exit %d)",
                        job, *([] if result == 0 else [result]))
        trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.signum is not None and self._wrapped is not None:
            signals.signal(self.signum, self._wrapped)
            self._wrapped = None
