"""Reading a sweep directory: one summary.json per finished job, nothing else.

A job is a directory holding Hydra's ``.hydra/`` folder (any depth, so SLURM and nested layouts work);
without a readable summary.json it is still running or has failed, and the report lists it. A job that successive
halving or an Optuna pruner stopped before its last epoch (summary.json's `stopped_at_epoch`) is listed apart: its
accuracy is from fewer epochs than the others', so it is not ranked with them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from elasticface.utils.errors import MissingPath

REQUIRED_KEYS = ("head", "m", "sigma", "seed", "val/sets")
#: a job stopped by a user's mistake writes this into its folder (cli/job_failures.py)
FAILED = "failed.json"


@dataclass
class Job:
    path: Path
    summary: dict[str, Any] | None = None
    problem: str = ""  # why there is no usable summary
    stopped: str = ""  # successive halving or a pruner stopped it before the full run: where and why

    @property
    def done(self) -> bool:
        return self.summary is not None and not self.stopped


@dataclass
class Sweep:
    root: Path
    jobs: list[Job] = field(default_factory=list)

    @property
    def finished(self) -> list[Job]:
        return [j for j in self.jobs if j.done]

    @property
    def unfinished(self) -> list[Job]:
        return [j for j in self.jobs if not j.done and not j.stopped]

    @property
    def stopped(self) -> list[Job]:
        return [j for j in self.jobs if j.stopped]


def _read_summary(path: Path) -> tuple[dict[str, Any] | None, str]:
    file = path / "summary.json"
    failed = path / FAILED
    if failed.exists() and not file.exists():
        try:
            return None, f"failed: {json.loads(failed.read_text())['error']}"
        except (OSError, ValueError, KeyError, TypeError):
            return None, f"failed ({failed} unreadable)"
    if not file.exists():
        return None, "no summary.json: still running, or failed"
    try:
        summary = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        return None, f"{file}: unreadable ({err})"
    missing = [k for k in REQUIRED_KEYS if k not in summary]
    if missing:
        return None, f"{file}: missing key(s) {missing}"
    sets = summary["val/sets"]
    if not isinstance(sets, dict) or not sets:
        return None, f"{file}: 'val/sets' has no benchmark accuracies"
    empty = [name for name, acc in sets.items() if acc is None]
    if empty:
        return None, f"{file}: no accuracy for {empty} in 'val/sets' (validation never ran)"
    return summary, ""


def _early_stop(summary: dict[str, Any] | None) -> str:
    """Where and why successive halving or a pruner stopped the job ("" for a job that ran to its end)."""
    if summary is None or summary.get("stopped_at_epoch") is None:
        return ""
    why = (summary.get("halving") or {}).get("why") or (summary.get("pruned") or {}).get("why")
    return why or f"stopped after epoch {summary['stopped_at_epoch']} for a round of successive halving"


def read_sweep(root: str | Path) -> Sweep:
    """Every job under ``root`` (a multirun directory, or a single run's directory)."""
    root = Path(root)
    if not root.is_dir():
        raise MissingPath(f"sweep directory {root} does not exist")
    dirs = sorted(
        {p.parent for p in root.rglob(".hydra") if p.is_dir()} | {p.parent for p in root.rglob("summary.json")}
    )
    if not dirs:
        raise MissingPath(f"{root}: no job directories (a folder with .hydra/ or summary.json) below it")
    sweep = Sweep(root)
    for d in dirs:
        summary, problem = _read_summary(d)
        sweep.jobs.append(Job(d, summary, problem, _early_stop(summary)))
    return sweep
