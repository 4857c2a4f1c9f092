"""How much of the head's margin each training step applies: λ(step) in [0, 1], for every head alike.

With s = 64 and a margin on a small set or a short run, a margin head starts at θ_y ≈ 90° with a target logit
of about -31 and may never leave it (docs/margin_schedule.md measures where it stalls). The field's remedies
start the margin small: a warm-up (λ from `start` to 1 over the first steps) or insightface's two-stage recipe
as one run (`softmax_start`: λ = 0, normalised softmax on the same centres, then the whole margin). The head
applies λ to its target logit (:meth:`elasticface.heads.base.MarginHead.plan`); λ depends on the global step
alone, so a resumed run continues the schedule exactly.

`margin_schedule=none` (λ = 1 throughout) is the paper's and the released code's recipe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from elasticface.utils.errors import BadValue

KINDS = ("none", "warmup", "softmax_start")


@dataclass(frozen=True)
class MarginSchedule:
    """`kind`: none, warmup (linear from `start` to 1) or softmax_start (0, then 1). Its length: `steps`
    (optimizer steps) or, when that is null, `fraction` of the run's steps."""

    kind: str = "none"
    steps: int | None = None
    fraction: float | None = None
    start: float = 0.0

    def __post_init__(self) -> None:
        key = "margin_schedule"
        if self.kind not in KINDS:
            raise BadValue(f"{key}.kind={self.kind!r}: expected one of {list(KINDS)}")
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int)
                                       or self.steps < 0):
            raise BadValue(f"{key}.steps={self.steps!r}: expected a whole number of optimizer steps >= 0, or null")
        if self.fraction is not None and (isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float))
                                          or not 0.0 <= self.fraction <= 1.0):
            raise BadValue(f"{key}.fraction={self.fraction!r}: expected a share of the run in [0, 1], or null")
        if isinstance(self.start, bool) or not isinstance(self.start, (int, float)) or not 0.0 <= self.start <= 1.0:
            raise BadValue(f"{key}.start={self.start!r}: expected a margin weight in [0, 1]")
        if self.kind != "none" and self.steps is None and self.fraction is None:
            raise BadValue(f"{key}.kind={self.kind}: set margin_schedule.steps or margin_schedule.fraction")

    def length(self, total_steps: int | float) -> int:
        """The schedule's steps in a run of `total_steps`; ValueError (before the first step) if longer."""
        if self.kind == "none":
            return 0
        if self.steps is not None:
            if math.isfinite(total_steps) and self.steps > total_steps:
                raise BadValue(f"margin_schedule.steps={self.steps}: longer than the run ({int(total_steps)} "
                                 "optimizer steps); expected at most that, or margin_schedule.fraction")
            return self.steps
        if not math.isfinite(total_steps):
            raise BadValue(f"margin_schedule.fraction={self.fraction}: the run's length is unknown (no "
                             "trainer.max_steps or max_epochs); set margin_schedule.steps")
        return round(self.fraction * total_steps)

    def weight(self, step: int, length: int) -> float:
        """λ at optimizer step `step` (0-based) of a schedule `length` steps long."""
        if self.kind == "none" or step >= length:
            return 1.0
        if self.kind == "softmax_start":
            return 0.0
        return self.start + (1.0 - self.start) * step / length
