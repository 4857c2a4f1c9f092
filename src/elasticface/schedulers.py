"""Per-step learning-rate schedules with linear warm-up, as the face recognition recipes use them.

Each factory takes the optimizer and the run's total number of optimizer steps (known only once the
Trainer has seen the data), so a config can give milestones either in steps (the paper's 80k/140k/...)
or as fractions of the run (portable across dataset sizes and batch sizes). `epoch_multistep` is the released
ElasticFace code's schedule, advanced once per epoch (its config says `interval: epoch`, which the module hands to
Lightning); the others advance after every optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from elasticface.utils.errors import BadValue


def _warmup(step: int, warmup_steps: int) -> float:
    return (step + 1) / warmup_steps if step < warmup_steps else 1.0


def _warmup_steps(warmup_steps: int, warmup_fraction: float, total_steps: int) -> int:
    """The warm-up's length: `warmup_steps`, or `warmup_fraction` of the run (one of the two, or neither).

    A warm-up is what lets a margin head leave its hard start on a small set: at s = 64 the first steps'
    gradients are large enough to throw the class centres far from the origin, where they stop turning
    (docs/margin_schedule.md)."""
    if isinstance(warmup_fraction, bool) or not isinstance(warmup_fraction, (int, float)) \
            or not 0.0 <= warmup_fraction < 1.0:
        raise BadValue(f"scheduler.warmup_fraction={warmup_fraction!r}: expected a share of the run in [0, 1)")
    if warmup_steps and warmup_fraction:
        raise BadValue(f"scheduler.warmup_steps={warmup_steps} and scheduler.warmup_fraction={warmup_fraction}: "
                         "expected one of the two (set the other to 0)")
    steps = warmup_steps or int(round(warmup_fraction * total_steps))
    if steps < 0 or steps >= max(total_steps, 1):
        raise BadValue(f"scheduler.warmup_steps={steps}: must be in [0, total steps = {total_steps})")
    return steps


def multistep(
    optimizer: Optimizer,
    total_steps: int,
    milestones: Sequence[int] = (),
    milestone_fractions: Sequence[float] = (),
    gamma: float = 0.1,
    warmup_steps: int = 0,
    warmup_fraction: float = 0.0,
) -> LambdaLR:
    """lr × gamma^(number of milestones passed); milestones in steps and/or fractions of total_steps."""
    if any(not 0.0 < f < 1.0 for f in milestone_fractions):
        raise BadValue(f"scheduler.milestone_fractions={list(milestone_fractions)}: each must be in (0, 1)")
    warmup_steps = _warmup_steps(warmup_steps, warmup_fraction, total_steps)
    points = sorted([int(m) for m in milestones] + [int(round(f * total_steps)) for f in milestone_fractions])

    def factor(step: int) -> float:
        return _warmup(step, warmup_steps) * gamma ** sum(step >= p for p in points)

    return LambdaLR(optimizer, factor)


def epoch_multistep(
    optimizer: Optimizer, total_steps: int, milestones: Sequence[int] = (), gamma: float = 0.1
) -> LambdaLR:
    """lr × gamma for each milestone m with m - 1 <= epoch (0-based), stepped once per epoch: the released
    ElasticFace code's `lr_step_func` (config/config.py:50-52) and LambdaLR (train.py:177-178). Milestone m
    lowers the lr from the start of 0-based epoch m - 1, i.e. after m - 1 full epochs; `total_steps` is unused."""
    if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in milestones):
        raise BadValue(f"scheduler.milestones={list(milestones)}: epochs, each an integer >= 1")
    points = [int(m) - 1 for m in milestones]

    def factor(epoch: int) -> float:
        return gamma ** sum(epoch >= p for p in points)

    return LambdaLR(optimizer, factor)


def cosine(optimizer: Optimizer, total_steps: int, warmup_steps: int = 0, min_lr_ratio: float = 0.0,
           warmup_fraction: float = 0.0) -> LambdaLR:
    """Cosine decay from the base lr to min_lr_ratio × base lr after warm-up."""
    warmup_steps = _warmup_steps(warmup_steps, warmup_fraction, total_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def polynomial(optimizer: Optimizer, total_steps: int, warmup_steps: int = 0, power: float = 2.0,
               warmup_fraction: float = 0.0) -> LambdaLR:
    """insightface arcface_torch's PolyScheduler: (1 - progress)^power after warm-up."""
    warmup_steps = _warmup_steps(warmup_steps, warmup_fraction, total_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return (1.0 - progress) ** power

    return LambdaLR(optimizer, factor)
