"""How many CPU threads torch uses: the cores this process may use, shared among the processes of the job.

Why not torch's default (`os.cpu_count()`'s cores): a container's cgroup quota or a scheduler's CPU affinity
(SLURM, taskset) often grants fewer cores than the machine has, and an OpenMP team larger than the cores it
gets waits at every parallel op for a thread that is not running. On a shared 2-core machine two processes
with 2 threads each trained a small model tens of times slower than one thread each.

The rule, in one place (the training job and the test suite both call `choose_threads`):

1. an explicit count (`trainer.threads=N`), else `OMP_NUM_THREADS` when set, else
2. the cores allowed (`allowed_cores`: affinity, cgroup v2 `cpu.max` or v1 CFS quota) divided by the
   processes that share them (DDP processes on this node, pytest-xdist workers);
3. a count above that share is clamped to it with one warning line; zero, negative or not a whole number is
   refused with an error naming the setting.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_cgroup_dirs(root: Path, proc_cgroup: Path) -> list[Path]:
    """The cgroup directories that may hold this process's CPU limit: its own (from /proc/self/cgroup), then
    the root (inside a container the process's cgroup is usually mounted as the root)."""
    dirs = []
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            controllers = parts[1].split(",")
            sub = parts[2].lstrip("/")
            if parts[0] == "0" and parts[1] == "":  # cgroup v2
                dirs.append(root / sub)
            elif "cpu" in controllers:  # cgroup v1
                dirs += [root / name / sub for name in ("cpu", "cpu,cpuacct")]
    return dirs + [root, root / "cpu", root / "cpu,cpuacct"]


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The whole cores a cgroup CPU quota allows (quota / period, rounded down, at least 1), or None without one.

    Rounded down: with 1.5 cores of quota a second thread is throttled for part of every period, and the
    first waits for it at every parallel op.
    """
    for directory in _own_cgroup_dirs(root, proc_cgroup):
        v2 = _read(directory / "cpu.max")  # "max 100000" or "<quota> <period>"
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
                return max(1, int(quota) // int(period))
            return None
        quota_v1, period_v1 = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
        if quota_v1 is not None and period_v1 is not None:
            if quota_v1.lstrip("-").isdigit() and int(quota_v1) > 0 and period_v1.isdigit() and int(period_v1) > 0:
                return max(1, int(quota_v1) // int(period_v1))
            return None
    return None


def affinity_cores() -> int:
    """The cores this process may be scheduled on (taskset, SLURM's cpuset); the machine's count where the
    platform cannot say (macOS, Windows)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def allowed_cores() -> int:
    """The cores this process may use: its affinity, capped by a cgroup quota."""
    quota = cgroup_cpu_limit()
    cores = affinity_cores()
    return cores if quota is None else min(cores, quota)


@dataclass(frozen=True)
class ThreadChoice:
    """What `choose_threads` chose, and the one line that says why."""

    threads: int
    reason: str


def _whole_positive(value: object, setting: str) -> int:
    """`value` as a thread count >= 1, or an error that names the setting."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.lstrip("-").isdigit():
        raise BadValue(f"{setting}={value!r}: expected a whole number of threads >= 1, or auto")
    count = int(text)
    if count < 1:
        raise BadValue(f"{setting}={count}: a thread count must be >= 1 (or auto: the cores this process may use)")
    return count


def choose_threads(
    requested: int | str | None = "auto",
    *,
    processes: int = 1,
    setting: str = "trainer.threads",
    cores: int | None = None,
    environ: dict[str, str] | None = None,
) -> ThreadChoice:
    """The torch thread count for one of `processes` processes sharing this process's allowed cores.

    `requested` is a count or `auto`/None (then `OMP_NUM_THREADS` when set, else the process's share of
    the cores). `cores` and `environ` default to `allowed_cores()` and `os.environ`.
    """
    cores = allowed_cores() if cores is None else cores
    environ = os.environ if environ is None else environ
    if processes < 1:
        raise BadValue(f"processes={processes}: expected >= 1")
    share = max(1, cores // processes)
    among = f"{cores} core(s) allowed" + (f", shared by {processes} processes" if processes > 1 else "")
    if requested is None or str(requested).strip().lower() == "auto":
        omp = environ.get("OMP_NUM_THREADS", "").strip()
        if not omp:
            return ThreadChoice(share, f"{setting}=auto: {among}")
        setting, count = "OMP_NUM_THREADS", _whole_positive(omp, "OMP_NUM_THREADS")
    else:
        count = _whole_positive(requested, setting)
    if count > share:
        log.warning("%s=%d is more than this process's share of the cores (%s): using %d thread(s)",
                    setting, count, among, share)
        return ThreadChoice(share, f"{setting}={count} clamped: {among}")
    return ThreadChoice(count, f"{setting}={count}: {among}")


def apply_threads(choice: ThreadChoice) -> None:
    """Set torch's intra-op threads, and `OMP_NUM_THREADS` for the processes this one starts (DDP workers,
    commands), which otherwise each take every core."""
    torch.set_num_threads(choice.threads)
    os.environ["OMP_NUM_THREADS"] = str(choice.threads)
    log.info("torch threads: %d (%s)", choice.threads, choice.reason)
