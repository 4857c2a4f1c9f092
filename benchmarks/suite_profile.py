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

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

#: the CUDA runtime calls with which the host waits for the device
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
#: the op behind `.item()`, `bool(tensor)`, `if tensor:`: a read of a device value by the host
HOST_READ_OP = "aten::_local_scalar_dense"


@dataclass
class Profile:
    """The summary of one profiled window."""

    steps: int
    window_ms: float  # wall time of the window
    kernel_ms: float  # device time in kernels (CPU: the ops' own CPU time)
    top: list[dict] = field(default_factory=list)  # name, ms per step, share of kernel time, calls per step
    syncs_per_step: float | None = None  # CUDA synchronise calls (None on a CPU)
    host_reads_per_step: float = 0.0
    busy: float | None = None  # share of the window the GPU spent in kernels (None on a CPU: ops include the host)


class WindowProfiler:
    """torch.profiler from `start()` to `stop()`, each after synchronising the device; `summary()` afterwards."""

    def __init__(self, device: str, steps: int, top: int = 12) -> None:
        self.device, self.steps, self.top = device, steps, top
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        self._prof = profile(activities=activities)
        self._t0 = 0.0
        self.window_ms = float("nan")

    def start(self) -> None:
        self._prof.__enter__()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.window_ms = (time.perf_counter() - self._t0) * 1e3
        self._prof.__exit__(None, None, None)

    def summary(self) -> Profile:
        events = self._prof.key_averages()
        on_device = self.device == "cuda"

        def own_us(e) -> float:
            return e.self_device_time_total if on_device else e.self_cpu_time_total

        kernels = [e for e in events if (e.device_type == DeviceType.CUDA) == on_device and own_us(e) > 0]
        kernel_us = sum(own_us(e) for e in kernels)
        top = [{"name": e.key, "ms_per_step": own_us(e) / 1e3 / self.steps,
                "share": own_us(e) / kernel_us if kernel_us else 0.0, "calls_per_step": e.count / self.steps}
               for e in sorted(kernels, key=own_us, reverse=True)[:self.top]]
        counts = {e.key: e.count for e in events}
        syncs = sum(counts.get(name, 0) for name in SYNC_CALLS) / self.steps if on_device else None
        reads = counts.get(HOST_READ_OP, 0) / self.steps
        return Profile(self.steps, self.window_ms, kernel_us / 1e3, top, syncs, reads,
                       busy=kernel_us / 1e3 / self.window_ms if on_device else None)


def profile_text(what: str, p: Profile, width: int = 90) -> list[str]:
    """The lines the suite prints for one profiled side."""
    busy = "" if p.busy is None else f"device busy {100 * p.busy:.0f}% of the window, "
    syncs = "" if p.syncs_per_step is None else f"{p.syncs_per_step:.1f} CUDA synchronise calls and "
    lines = [f"  {what}: {p.window_ms / p.steps:.1f} ms per step under the profiler, {busy}"
             f"{p.kernel_ms / p.steps:.1f} ms of {'kernels' if p.busy is not None else 'op CPU time'} per step; "
             f"{syncs}{p.host_reads_per_step:.1f} host reads per step"]
    for k in p.top:
        name = k["name"] if len(k["name"]) <= width else k["name"][:width - 3] + "..."
        lines.append(f"    {100 * k['share']:5.1f}%  {k['ms_per_step']:8.2f} ms  {k['calls_per_step']:6.1f}x  {name}")
    return lines
