"""What makes a second run in a process faster, tested by switching it (issue 71): on an H200 the iresnet100 row at
batch 256 read 70 ms a step when it ran second in its process and 85 ms when it ran first. Each switch is the row
with one thing changed, in a process of its own; the row that counts is the first of its process, against
`baseline` measured the same way. Which process compiled from nothing and which found inductor's cache shows in
each row (the call's first process compiles, and autotunes inductor's kernels, from nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Switch:
    name: str
    why: str
    overrides: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    gc: str | None = None  # template.GC_MODES
    warmup: int | None = None  # None: the suite's --warmup
    second_run: bool = False
    profile: bool = False
    costly: bool = False  # compiles from nothing: not among the default switches


SWITCHES = (
    Switch("baseline", "the row as the suite runs it, first in its process"),
    Switch("cuda graphs", "model.compile_mode=reduce-overhead: each graph replayed by one launch (profiled)",
           overrides=("model.compile_mode=reduce-overhead",), profile=True),
    Switch("gc frozen", "gc.collect() + gc.freeze() before the timed steps: compilation's objects leave every "
           "later collection", gc="freeze"),
    Switch("gc off", "gc.collect() + gc.disable() before the timed steps", gc="disable"),
    Switch("cudnn.benchmark off", "trainer.benchmark=false: no cuDNN autotuning in the warm-up",
           overrides=("trainer.benchmark=false",)),
    Switch("allocator expandable", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator grows "
           "segments in place", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    Switch("long warm-up", "100 warm-up steps: warmer clocks, allocator and autotuners in the same process",
           warmup=100),
    Switch("second run", "the row run twice in its process: the first counts, the second is the effect itself",
           second_run=True),
    Switch("max-autotune", "model.compile_mode=max-autotune-no-cudagraphs: inductor benchmarks its kernel choices "
           "(compiles from nothing: minutes)", overrides=("model.compile_mode=max-autotune-no-cudagraphs",),
           costly=True),
)
NAMES = tuple(s.name for s in SWITCHES)
DEFAULT = tuple(s.name for s in SWITCHES if not s.costly)


def by_name(name: str) -> Switch:
    return next(s for s in SWITCHES if s.name == name)


def job_of(switch: Switch, base: dict) -> dict:
    """The template job of `base` (rows.template_job's) with `switch` applied."""
    job = {**base, "overrides": [*base["overrides"], *switch.overrides], "env": dict(switch.env), "gc": switch.gc,
           "second_run": switch.second_run, "switch": switch.name}
    if switch.warmup is not None:
        job["warmup"] = switch.warmup
    return job
