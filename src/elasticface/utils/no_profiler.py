"""The Trainer's profiler when none is configured: Lightning's pass-through, without its context manager.

Lightning wraps every hook of every callback in `trainer.profiler.profile(name)`, about 190 times a training step
with this project's callbacks. The default `PassThroughProfiler` does nothing inside, but its `profile` is a
generator-based context manager, built and torn down each time: 1.5 us a hook against 0.2 us here, 0.1 to
0.25 ms a step on a 2-core CPU by its load (benchmarks/bench_train.py's zero-cost case, docs/speed.md). This
one hands back the same empty context each time. `trainer.profiler=simple` (or any other) is used as configured.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pytorch_lightning.profilers import PassThroughProfiler

_NOTHING = contextlib.nullcontext()


class NoProfiler(PassThroughProfiler):
    def profile(self, action_name: str) -> Any:  # type: ignore[override]
        return _NOTHING
