"""Every multirun's sweeper (configs/train.yaml): Hydra's basic sweeper, plus successive halving when `halving.eta`
is set (elasticface/sweeps/halving.py has the rule).

With halving each round is one `launcher.launch` of the jobs still in the sweep, with `halving.stop_epoch=<budget>`
and `resume=auto` added to their overrides, so any launcher runs it (basic, joblib, SLURM with its requeue): a job
stopped by a budget continues from its own last.ckpt in the next round, in its own folder (`hydra.sweep.subdir`
fixed to the folder its first round wrote). Between rounds the sweeper ranks the jobs on their summary.json and
records the round in the sweep's halving.json.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

log = logging.getLogger(__name__)
PROG = "elasticface-train"


@dataclass
class HalvingSweeperConf:
    _target_: str = "hydra_plugins.elasticface_halving.halving_sweeper.HalvingSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


def register() -> None:
    """`hydra/sweeper=halving` in the config store (configs/train.yaml selects it)."""
    ConfigStore.instance().store(group="hydra/sweeper", name="halving", node=HalvingSweeperConf,
                                 provider="elasticface")


register()


def _quoted(text: str) -> str:
    """A value for Hydra's override grammar, whatever characters a folder name holds."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class HalvingSweeper(BasicSweeper):
    def sweep(self, arguments: List[str]) -> Any:
        from elasticface.sweeps import halving
        from elasticface.utils.errors import UserError, one_line

        assert self.config is not None and self.hydra_context is not None
        self.crashed = 0  # job runs that raised a defect: ranked last, named with their traceback, exit status 1
        try:
            plan = halving.plan(self.config)
        except UserError as err:
            self._fail(one_line(err))
        if plan is None:
            return super().sweep(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(self._parse_config() + list(arguments))
        jobs = [list(job) for job in self.split_arguments(overrides, None)[0]]
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        try:
            state = halving.load_state(sweep_dir, plan, jobs)
            returns = self._rounds(halving, state, sweep_dir)
        except UserError as err:
            self._fail(one_line(err))
        spent, full = state.epochs_trained(), len(jobs) * plan.max_epochs
        best = halving.final_ranking(state)
        log.info("successive halving (eta %d, budgets %s epochs): %d of the full grid's %d job-epochs (%.2f); "
                 "best: %s (%s); the sweep's record: %s", plan.eta, "/".join(map(str, plan.budgets)), spent, full,
                 spent / full, state.folders.get(best[0]), " ".join(jobs[best[0]]) or "no overrides",
                 sweep_dir / halving.STATE_FILE)
        if self.crashed:
            self._fail(f"{self.crashed} job run(s) crashed (their tracebacks are above); they were ranked last and "
                       "the others ran", status=1)
        return returns

    def _rounds(self, halving: Any, state: Any, sweep_dir: Path) -> list[Sequence[Any]]:
        """Launch each round not yet recorded in `state`, then rank it and keep the best."""
        returns = []
        for number, budget in enumerate(state.plan.budgets, start=1):
            if number <= len(state.rounds):
                continue  # recorded before an interruption: its ranking stands
            alive = state.alive()
            log.info("successive halving, round %d of %d: %d job(s) to epoch %d of %d", number,
                     len(state.plan.budgets), len(alive), budget, state.plan.max_epochs)
            batch = []
            for i in alive:
                job = state.jobs[i] + [f"{halving.STOP_KEY}={budget}", "resume=auto"]
                if i in state.folders:
                    job.append(f"hydra.sweep.subdir={_quoted(state.folders[i])}")
                batch.append(job)
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=0 if number == 1 else len(state.jobs))
            for i, result in zip(alive, results):
                output_dir = OmegaConf.select(getattr(result, "hydra_cfg", None) or {}, "hydra.runtime.output_dir")
                if output_dir is not None:
                    state.folders[i] = os.path.relpath(output_dir, sweep_dir.resolve())
            for i, result in zip(alive, results):
                crashed = getattr(result, "_return_value", None)
                if isinstance(crashed, BaseException):  # a defect, not a user's mistake (those return NaN)
                    log.error("job %s crashed in round %d", " ".join(state.jobs[i]), number, exc_info=crashed)
                    self.crashed += 1
            record = halving.finish_round(state, sweep_dir, budget, alive)
            for failed in (r for r in record["ranked"] if "failed" in r):
                log.warning("job %s failed in round %d, ranked last: %s", failed["folder"] or failed["job"],
                            number, failed["failed"])
            returns.append(results)
        return returns

    @staticmethod
    def _fail(line: str, status: int = 2) -> None:
        print(f"{PROG}: error: {line}", file=sys.stderr)
        raise SystemExit(status)
