"""The Trainer's profiler when none is configured: Lightning's pass-through, without its context manager.

Lightning wraps every hook of every callback in `trainer.profiler.profile(name)`, about 190 times a training step
with this project's callbacks. The default `PassThroughProfiler` does nothing inside, but its `profile` is a
generator-based context manager, built and torn down each time: about 0.2 ms a step on a CPU, a sixth of what
the Trainer costs over a plain loop (benchmarks/bench_train.py's zero-cost case). This one hands back the same
empty context each time. `trainer.profiler=simple` (or any other) is used as configured.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pytorch_lightning.profilers import PassThroughProfiler

_NOTHING = contextlib.nullcontext()


class NoProfiler(PassThroughProfiler):
    def profile(self, action_name: str) -> Any:  # type: ignore[override]
        return _NOTHING
