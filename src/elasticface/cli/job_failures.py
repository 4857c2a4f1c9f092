"""A job's mistakes under the contract, in a single run and inside a sweep.

In a single run a user's mistake ends the command in one line, exit status 2 (cli/preflight.py). Inside a
multirun the other jobs must still run: the failing job says so in its log and in `failed.json` in its folder,
returns, and `FailedJobs` (a Hydra callback, configs/hydra/default.yaml) lists every failed job in one line each
when the sweep ends and exits with status 2; `elasticface-report` lists them as failed.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from elasticface.cli.config_rules import check_config
from elasticface.cli.preflight import error_line, exit_with
from elasticface.utils.errors import user_error_in
from elasticface.utils.rule_kinds import Rule

log = logging.getLogger(__name__)



def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def checked_job(prog: str, cfg: DictConfig, rules: dict[str, Rule], work: Callable[[DictConfig], Any],
                failed: Any = None) -> Any:
    """`work(cfg)` after the config's rules (checked before Hydra started too, but a sweep's other values and a
    config tree of the user's are composed only here); a user's mistake ends the job under the contract. In a
    multirun the job returns `failed` (NaN for a sweeper that maximises: Optuna records a failed trial). A job run
    again in its folder (resume=auto, halving's next round) drops the failed.json of an earlier attempt first."""
    folder = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None) if HydraConfig.initialized() \
        else None
    if folder:
        from elasticface.report.sweep import FAILED

        (Path(folder) / FAILED).unlink(missing_ok=True)
    try:
        check_config(cfg, rules, dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {})
        return work(cfg)
    except Exception as raised:
        err = user_error_in(raised)
        if err is None:
            raise
        line = error_line(prog, err)
        if HydraConfig.initialized():
            from elasticface.report.sweep import FAILED  # here: the report package imports numpy, --help needs none

            folder = Path(HydraConfig.get().runtime.output_dir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / FAILED).write_text(json.dumps({"error": line, "exit_status": 2}, indent=2) + "\n")
        if not _in_multirun():
            exit_with(prog, err)
        log.error(line)
        return failed


def failed_jobs(sweep_dir: str | Path) -> list[tuple[Path, str]]:
    """(job folder, error line) of every job under `sweep_dir` that a user's mistake stopped."""
    from elasticface.report.sweep import FAILED

    found = []
    for marker in sorted(Path(sweep_dir).rglob(FAILED)):
        try:
            found.append((marker.parent, str(json.loads(marker.read_text())["error"])))
        except (OSError, ValueError, KeyError, TypeError):
            found.append((marker.parent, f"{marker}: unreadable"))
    return found


class FailedJobs(Callback):
    """When a multirun ends: one line per job a user's mistake stopped, then exit status 2."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        failed = failed_jobs(config.hydra.sweep.dir)
        if not failed:
            return
        for folder, line in failed:
            print(f"{folder.name}: {line}", file=sys.stderr)
        print(f"{len(failed)} job(s) of the sweep in {config.hydra.sweep.dir} failed; the others ran", file=sys.stderr)
        raise SystemExit(2)
