"""Where a GPU suite row's step time goes: torch.profiler over the steps a row times, for either side.

The question a row that falls short of its goal asks (issue 46): is the device idle between kernels (the host
launches too slowly or waits on the device), or busy with kernels that use little of the chip? The summary gives
the share of the window the device spent in kernels, the kernels that took most of it, and the host's waits on
the device per step (CUDA synchronise calls and `.item()`-style reads). On a CPU the same summary lists the ops
that took the most CPU time (the tests run it there at tiny sizes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from torch._C._profiler import _ExperimentalConfig
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from gpu_suite import host

#: the CUDA runtime calls with which the host waits for the device
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
#: the op behind `.item()`, `bool(tensor)`, `if tensor:`: a read of a device value by the host
HOST_READ_OP = "aten::_local_scalar_dense"


@dataclass
class Profile:
    """The summary of one profiled window."""

    steps: int
    window_ms: float  # wall time of the window
    kernel_ms: float  # device time in kernels, copies and memsets (CPU: the ops' own CPU time)
    top: list[dict] = field(default_factory=list)  # name, ms per step, share of kernel time, calls per step
    syncs_per_step: float | None = None  # CUDA synchronise calls (None on a CPU)
    host_reads_per_step: float = 0.0
    busy: float | None = None  # share of the window in which the GPU ran a kernel (None on a CPU)
    # where the host waited on the device (a synchronise call or a read of a device value): the innermost frame of
    # the step's own code (this project, Lightning, arcface_torch) and how often per step; with `stacks` only
    wait_sites: list[dict] = field(default_factory=list)
    # per source of host work (host.py: class layer, head, loss, backbone, optimizer, Lightning): launches, device
    # time, the device's idle time before them and the host's own time, per step; without stacks only
    sources: list[dict] = field(default_factory=list)


#: frames that say where a wait comes from (the innermost of these names the call site); the suite's own timer sync
#: at the window's end is left out
SITE_PATHS = ("elasticface", "pytorch_lightning", "lightning_fabric", "arcface_torch", "torch/optim", "torch/nn/utils")
OWN_SITES = ("gpu_suite/measure.py",)


def _kernels(events, on_device: bool) -> list:
    """The window's device work (kernels, copies, memsets): annotation ranges (`record_function` names such as
    `Optimizer.step#SGD.step`, which the profiler also lays on the device timeline) are not work. On a CPU: ops."""
    if not on_device:
        return [e for e in events if e.device_type != DeviceType.CUDA and e.self_cpu_time_total > 0
                and not getattr(e, "is_user_annotation", False) and not python_frame(e)]
    annotations = {e.name for e in events if e.device_type != DeviceType.CUDA and getattr(e, "is_user_annotation",
                                                                                           False)}
    return [e for e in events if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
            and e.name not in annotations and e.name != "[memory]"
            and not e.name.startswith(("ProfilerStep", "Optimizer."))]  # annotations, where torch does not flag them


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals: time in which at least one kernel ran (streams overlap)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def python_frame(event) -> bool:
    """A Python function event of the profiler's Python tracer ("file.py(line): function", "<built-in ...>")."""
    name = event.name
    return bool(getattr(event, "is_python_function", False)) or "): " in name or name.startswith("<built-in")


def wait_site(event) -> str:
    """The innermost frame of the step's own code ("file(line): function"): on the Python stack of `event`, else on
    those of the ops and Python calls around it (a CUDA runtime call such as cudaDeviceSynchronize has none)."""
    frames = []
    while event is not None:
        frames += list(event.stack or []) + ([event.name] if python_frame(event) else [])
        event = event.cpu_parent
    for frame in frames:
        if any(p in frame for p in SITE_PATHS + OWN_SITES):
            return frame
    return next((frame for frame in frames if ".py(" in frame), "(no Python stack)")


class WindowProfiler:
    """torch.profiler from `start()` to `stop()`, each after synchronising the device; `summary()` afterwards.
    `stacks=True` records Python stacks, to name where the host waits on the device (it slows the host)."""

    def __init__(self, device: str, steps: int, top: int = 12, stacks: bool = False) -> None:
        self.device, self.steps, self.top, self.stacks = device, steps, top, stacks
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        # verbose: the stacks are kept on every op, not only on Python function events
        self._prof = profile(activities=activities, with_stack=stacks,
                             experimental_config=_ExperimentalConfig(verbose=True) if stacks else None)
        self._t0 = 0.0
        self.window_ms = float("nan")

    def start(self) -> None:
        self._prof.__enter__()
        host.ACTIVE[0] = True
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.window_ms = (time.perf_counter() - self._t0) * 1e3
        host.ACTIVE[0] = False
        self._prof.__exit__(None, None, None)

    def summary(self) -> Profile:
        on_device = self.device == "cuda"
        events = list(self._prof.events())
        kernels = _kernels(events, on_device)

        def own_us(e) -> float:
            return e.time_range.end - e.time_range.start if on_device else e.self_cpu_time_total

        by_name: dict[str, list] = {}
        for e in kernels:
            by_name.setdefault(e.name, []).append(e)
        kernel_us = sum(own_us(e) for e in kernels)
        ranked = sorted(by_name.items(), key=lambda kv: sum(own_us(e) for e in kv[1]), reverse=True)
        top = [{"name": name, "ms_per_step": sum(own_us(e) for e in es) / 1e3 / self.steps,
                "share": sum(own_us(e) for e in es) / kernel_us if kernel_us else 0.0,
                "calls_per_step": len(es) / self.steps} for name, es in ranked[:self.top]]
        waits = [e for e in events if e.name in SYNC_CALLS + (HOST_READ_OP,)
                 and not any(own in wait_site(e) for own in OWN_SITES)]
        syncs = sum(e.name in SYNC_CALLS for e in waits) / self.steps if on_device else None
        reads = sum(e.name == HOST_READ_OP for e in waits) / self.steps
        sites: dict[str, int] = {}
        for e in waits if self.stacks else []:
            key = f"{e.name} at {wait_site(e)}"
            sites[key] = sites.get(key, 0) + 1
        wait_sites = [{"site": k, "per_step": n / self.steps} for k, n in sorted(sites.items(), key=lambda kv: -kv[1])]
        busy = None
        if on_device:
            busy = busy_us([(e.time_range.start, e.time_range.end) for e in kernels]) / 1e3 / self.window_ms
        sources = [] if self.stacks else host.attribute(events, self.steps, on_device)
        return Profile(self.steps, self.window_ms, kernel_us / 1e3, top, syncs, reads, busy=busy,
                       wait_sites=wait_sites[:8], sources=sources)


def profile_text(what: str, p: Profile, width: int = 90) -> list[str]:
    """The lines the suite prints for one profiled side."""
    busy = "" if p.busy is None else f"device busy (a kernel running) {100 * p.busy:.0f}% of the window, "
    syncs = "" if p.syncs_per_step is None else f"{p.syncs_per_step:.1f} CUDA synchronise calls and "
    lines = [f"  {what}: {p.window_ms / p.steps:.1f} ms per step under the profiler, {busy}"
             f"{p.kernel_ms / p.steps:.1f} ms of {'kernels' if p.busy is not None else 'op CPU time'} per step; "
             f"{syncs}{p.host_reads_per_step:.1f} host reads per step"]
    for k in p.top:
        name = k["name"] if len(k["name"]) <= width else k["name"][:width - 3] + "..."
        lines.append(f"    {100 * k['share']:5.1f}%  {k['ms_per_step']:8.2f} ms  {k['calls_per_step']:6.1f}x  {name}")
    for w in p.wait_sites:
        lines.append(f"    waits {w['per_step']:4.1f}x per step: {w['site'][:width + 40]}")
    if p.sources:
        lines += host.sources_text(p.sources, p.busy is not None)
    return lines
