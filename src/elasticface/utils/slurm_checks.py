"""What a SLURM sweep can be refused for, found before any job is queued: each check returns one line that
names the launcher key and what the cluster said, or None.

The cluster is the judge (`sbatch --test-only` validates a request without queuing it): only it knows its
partitions, accounts, GPUs and limits.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: words of sbatch's refusal -> the launcher key that asked for it
REFUSAL_KEYS = (
    ("account", "account"),  # before partition: "Invalid account or account/partition combination"
    ("partition", "partition"),
    ("qos", "qos"),
    ("time limit", "timeout_min"),
    ("gres", "gpus_per_node"),
    ("gpu", "gpus_per_node"),
    ("memory", "mem_gb"),
    ("cpu count", "cpus_per_task"),
    ("node count", "nodes"),
)


def check_clients() -> str | None:
    """The SLURM commands that submit and watch the jobs (submitit needs `srun` too) are on PATH."""
    missing = [name for name in ("sbatch", "srun") if shutil.which(name) is None]
    if missing:
        return (f"launcher=slurm: no `{missing[0]}` on PATH: run the sweep on a SLURM login node (or, to try it "
                "here, `make slurm-up` and the `export SLURM_CONF=...` line it prints)")
    return None


def check_time_limit(timeout_min: Any, signal_delay_s: Any) -> str | None:
    """SLURM signals a job `signal_delay_s` before its limit: a limit no longer than that stops every job before
    its first step, so no checkpoint is ever written and each requeue starts over."""
    if timeout_min is None or signal_delay_s is None:
        return None
    if int(timeout_min) * 60 <= int(signal_delay_s):
        return (f"hydra.launcher.timeout_min={timeout_min} ({int(timeout_min) * 60} s) is not longer than "
                f"hydra.launcher.signal_delay_s={signal_delay_s}: SLURM would send the checkpoint signal before the "
                "first step; expected timeout_min * 60 > signal_delay_s")
    return None


def refused_key(said: str) -> str:
    """The launcher key that sbatch's refusal is about (`hydra.launcher` when its words name none)."""
    lowered = said.lower()
    return next((key for words, key in REFUSAL_KEYS if words in lowered), "")


def check_request(script: Path, params: Mapping[str, Any]) -> str | None:
    """`sbatch --test-only <the sweep's batch script>`: what the cluster refused, or None."""
    out = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
    if out.returncode == 0:
        return None
    lines = [line.strip() for line in (out.stderr + out.stdout).splitlines() if line.strip()]
    said = (lines[-1] if lines else f"exit status {out.returncode}").removeprefix("sbatch: error: ")
    key = refused_key(said)
    setting = f"hydra.launcher.{key}={params.get(key)}" if key else "hydra.launcher"
    return f"{setting}: the cluster refused the job: {said}"
