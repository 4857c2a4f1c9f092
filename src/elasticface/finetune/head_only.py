"""A head-only phase before the backbone moves (Kumar et al., "Fine-Tuning can Distort Pretrained Features and
Underperform Out-of-Distribution", 2022: linear probing, then fine-tuning): for `finetune.head_only_epochs` the
centres and head train against the loaded backbone held fixed (eval mode, no graph), then everything trains, so
the backbone's first gradients come from centres that already fit its embeddings rather than from random ones."""

from __future__ import annotations

import math
from elasticface.utils.errors import BadValue

KEY = "finetune.head_only_epochs"


def head_only_steps(epochs: float, steps_per_epoch: float, run: int, unit: str = "steps") -> int:
    """The phase's length in the run's units (`round(epochs * steps_per_epoch)`); a phase as long as the run or
    longer is an error naming the key (the backbone would never train). No phase asks nothing of the run: a run
    whose epochs have no known length is fine without one."""
    if epochs <= 0:
        return 0
    if not math.isfinite(steps_per_epoch):
        raise BadValue(f"{KEY}={epochs:g}: this run's epochs have no known length (Lightning counts "
                         f"{steps_per_epoch} batches per epoch), so neither has a phase in epochs; bound the epochs "
                         f"(trainer.limit_train_batches) or set {KEY}=0")
    phase = round(epochs * steps_per_epoch)
    if phase >= run:
        raise BadValue(f"{KEY}={epochs:g}: the head-only phase ({phase} {unit}) is not shorter than the run ({run} "
                         f"{unit}), so the backbone would never train (finetune.backbone_lr_scale=0 keeps it fixed on "
                         f"purpose)")
    return phase
