"""A run resumed on another global batch keeps its schedule in images seen, or says that it will not.

Every checkpoint records the global batch it trained at (world size x data.batch_size x accumulate_grad_batches)
and the images seen so far. With `batch_scaling.reference_batch` set (the lr and step milestones follow the
global batch, elasticface/batch_scaling.py), a checkpoint of another global batch continues at the step that
means the same number of images at this one: the step counters, the schedule's position and its base lr are
converted before the first step, and one log line says so. With scaling off the values are used as written, so
the lr and the decay points jump in images seen: a warning says so before the first step, and which key keeps it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from torch.optim.lr_scheduler import LambdaLR

from elasticface.utils.lightning_private import move_step_counters

log = logging.getLogger(__name__)

SCALING_KEY = "batch_scaling.reference_batch"


def runtime_global_batch(trainer: pl.Trainer) -> int | None:
    """Images per optimizer step across all ranks, as this trainer runs; None without a batch size to read."""
    batch_size = getattr(getattr(trainer, "datamodule", None), "batch_size", None)
    if not isinstance(batch_size, int):
        return None
    return int(trainer.world_size) * batch_size * int(trainer.accumulate_grad_batches)


class ImagesSeen(pl.Callback):
    """Records the global batch and images seen in each checkpoint; converts a resume from another global batch
    when batch scaling is on (`reference_batch`, the config's batch_scaling.reference_batch), else warns that the
    schedule jumps."""

    def __init__(self, reference_batch: int | None = None) -> None:
        self.scaled = reference_batch is not None
        self.global_batch: int | None = None
        self.start_images = 0  # images seen at `start_step` (0 and 0 for a fresh run)
        self.start_step = 0
        self.converted: float | None = None  # new / old global batch of a converted resume, applied at train start

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.global_batch = runtime_global_batch(trainer)

    def images_seen(self, step: int) -> int | None:
        if self.global_batch is None:
            return None
        return self.start_images + (step - self.start_step) * self.global_batch

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if self.global_batch is not None:
            checkpoint["global_batch"] = self.global_batch
            checkpoint["images_seen"] = self.images_seen(trainer.global_step)

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        step, new = int(checkpoint.get("global_step", 0)), self.global_batch
        old = checkpoint.get("global_batch")
        images = checkpoint.get("images_seen")
        if new is None:
            return
        if not isinstance(old, int) or not isinstance(images, int):
            self.start_images, self.start_step = step * new, step
            if self.scaled:
                log.warning("resume: the checkpoint records no global batch (written before batch scaling): its "
                            "step %d is taken to be at this run's global batch %d; had it another, the lr and the "
                            "decay points jump in images seen", step, new)
            return
        if old == new:
            self.start_images, self.start_step = images, step
            return
        if not self.scaled:
            self.start_images, self.start_step = images, step
            log.warning(
                "resume: the schedule jumps. The checkpoint trained at global batch %d (%d images at step %d); this "
                "run's global batch is %d and %s is null, so optimizer.lr and the step milestones stay as written "
                "in steps: the lr per image changes x%g and each decay comes after x%g the images. Set %s=<the "
                "global batch the lr and milestones are written for> to keep the schedule in images seen",
                old, images, step, new, SCALING_KEY, new / old, new / old, SCALING_KEY)
            return
        moved = int(round(images / new))
        move_step_counters(checkpoint, moved)
        self.start_images, self.start_step = images, moved
        self.converted = new / old
        log.info("resume: global batch %d -> %d: %d images seen, step %d continues as step %d (the lr x%g, the "
                 "schedule in images seen)", old, new, images, step, moved, new / old)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After the restore, before the first step: the restored schedules at the converted position and lr."""
        if self.converted is None:
            return
        for config in trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            scheduler.base_lrs = [lr * self.converted for lr in scheduler.base_lrs]
            if config.interval == "step":
                scheduler.last_epoch = trainer.global_step
            for group, base, lr in zip(scheduler.optimizer.param_groups, scheduler.base_lrs,
                                       _lrs_at(scheduler), strict=True):
                group["initial_lr"], group["lr"] = base, lr
        if not trainer.lr_scheduler_configs:
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] *= self.converted
        self.converted = None


def _lrs_at(scheduler: Any) -> list[float]:
    """The lr of each group at the scheduler's position: a LambdaLR's closed form (every schedule of this package);
    another scheduler's restored lr, scaled as its base lr was (its group's `initial_lr` is still the old base)."""
    bases = scheduler.base_lrs
    if isinstance(scheduler, LambdaLR):
        return [base * f(scheduler.last_epoch) for f, base in zip(scheduler.lr_lambdas, bases, strict=True)]
    return [group["lr"] * base / group.get("initial_lr", base)
            for group, base in zip(scheduler.optimizer.param_groups, bases, strict=True)]
