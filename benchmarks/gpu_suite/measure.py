"""What every row of the GPU suite (rows.py) measures the same way, on either side of a comparison.

Timing: `warmup` untimed steps, then `steps` timed ones with the device synchronised only at the two ends.
Peak memory: the most the caching allocator held during the run above what it held when the run started
(the input batches, resident for both sides, are not counted). FLOPs: one forward + backward counted by
torch.utils.flop_counter. Host syncs: counted by CUDA's sync debug mode over steps after the timed ones,
so the warnings it raises cost nothing inside the timed window.
"""

from __future__ import annotations

import gc
import time
import warnings
from dataclasses import dataclass, field

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench_train import device_peak


@dataclass
class Measured:
    """One side of one row: images/s over the timed steps, and what the run left behind."""

    batch: int
    seconds_per_step: float
    peak_mib: float | None = None
    flops_per_step: float | None = None
    losses: list[float] = field(default_factory=list)  # steps 0, 1 and the last one
    syncs_per_step: float | None = None
    note: str = ""

    @property
    def images_per_s(self) -> float:
        return self.batch / self.seconds_per_step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def clear(device: str) -> None:
    """Free what earlier rows left, so each row's peak memory is its own."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


class MemoryWatch:
    """Peak allocated bytes above the level at `start()` (CUDA only; None on a CPU)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.base = 0

    def start(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()

    def peak_mib(self) -> float | None:
        if self.device != "cuda":
            return None
        return (torch.cuda.max_memory_allocated() - self.base) / 2**20


def count_flops(step) -> float | None:
    """FLOPs of `step()` (a forward + backward) as torch.utils.flop_counter counts them; None (MFU n/a) if the
    counter cannot run the step, so the row's times are still printed."""
    try:
        with FlopCounterMode(display=False) as counter:
            step()
    except Exception as exc:  # noqa: BLE001 - e.g. an op the counting mode cannot dispatch
        print(f"FLOP count failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}): "
              "MFU n/a", flush=True)
        return None
    return float(counter.get_total_flops())


class SyncCounter:
    """Host synchronisations of the CUDA device while active (torch.cuda.set_sync_debug_mode("warn"))."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.count: int | None = None
        self._catch: warnings.catch_warnings | None = None
        self._records: list | None = None

    def start(self) -> None:
        if self.device != "cuda":
            return
        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> None:
        if self._catch is None:
            return
        torch.cuda.set_sync_debug_mode(0)
        self._catch.__exit__(None, None, None)
        self.count = sum("synchroniz" in str(w.message) for w in self._records or [])
        self._catch = None


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU ({torch.get_num_threads()} torch threads)"


def bf16_peak(name: str, override_tflops: float | None) -> float | None:
    """Dense bf16 FLOP/s of the device by name (bench_train's table); None for a device not in it."""
    return device_peak(name, override_tflops)


def mfu_text(m: Measured | None, peak: float | None) -> str:
    if m is None or m.flops_per_step is None:
        return "n/a"
    if peak is None:
        return "unknown peak"
    return f"{100 * m.flops_per_step / m.seconds_per_step / peak:.1f}%"


def failure(exc: BaseException, what: str) -> str:
    """One line naming why a row could not be measured (Hydra's instantiation error: the error it wraps)."""
    while type(exc).__name__ == "InstantiationException" and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, torch.OutOfMemoryError):
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"{what}: does not fit: CUDA out of memory ({first[:160]})"
    return f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


class StepTimer:
    """Wall time from the start of step `warmup` to the end of step `warmup + steps - 1`; a `profiler`
    (profiling.WindowProfiler) records the same window."""

    def __init__(self, warmup: int, steps: int, device: str, profiler=None) -> None:
        self.warmup, self.steps, self.device, self.profiler = warmup, steps, device, profiler
        self.t0 = 0.0
        self.seconds = float("nan")

    def before(self, i: int) -> None:
        if i == self.warmup:
            sync(self.device)
            if self.profiler is not None:
                self.profiler.start()
            self.t0 = time.perf_counter()

    def after(self, i: int) -> None:
        if i == self.warmup + self.steps - 1:
            sync(self.device)
            self.seconds = (time.perf_counter() - self.t0) / self.steps
            if self.profiler is not None:
                self.profiler.stop()


def kept_losses(losses: list[torch.Tensor], last: int) -> list[float]:
    """Steps 0, 1 and `last` (read once the run is over: no host read inside the steps)."""
    picks = sorted({0, min(1, len(losses) - 1), min(last, len(losses) - 1)})
    return [float(losses[i]) for i in picks] if losses else []
