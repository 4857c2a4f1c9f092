"""`hydra/sweeper=optuna` (hparams_search=elastic_optuna): an Optuna search whose jobs a pruner can stop.

The keys are those of Hydra's Optuna sweeper (sampler, direction, storage, study_name, n_trials, n_jobs, params in
Hydra's sweep grammar), plus `pruner`: `hydra/sweeper/pruner=median|percentile|successive_halving|hyperband|
threshold` picks Optuna's; the default, `none`, stops no trial. Each round asks the study for n_jobs trials,
launches them with any launcher (basic, joblib, SLURM) and tells the study what each job left: PRUNED (its
summary.json says the pruner stopped it), COMPLETE with the value it returned, or FAIL. sweeps/optuna_study.py has
the rules both sides share.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import MISSING, DictConfig, OmegaConf

log = logging.getLogger(__name__)
PROG = "elasticface-train"


@dataclass
class PrunerConf:
    _target_: str = MISSING


@dataclass
class NopPrunerConf(PrunerConf):
    """No trial is stopped (the default): every trial runs to its end."""
    _target_: str = "optuna.pruners.NopPruner"


@dataclass
class MedianPrunerConf(PrunerConf):
    """A trial below the median of the finished trials at the same epoch stops."""
    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: int = 5
    n_warmup_steps: int = 1
    interval_steps: int = 1


@dataclass
class PercentilePrunerConf(PrunerConf):
    """A trial below this percentile of the finished trials at the same epoch stops."""
    _target_: str = "optuna.pruners.PercentilePruner"
    percentile: float = 25.0
    n_startup_trials: int = 5
    n_warmup_steps: int = 1
    interval_steps: int = 1


@dataclass
class SuccessiveHalvingPrunerConf(PrunerConf):
    """Asynchronous successive halving (ASHA) over the epochs."""
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Any = "auto"
    reduction_factor: int = 4
    min_early_stopping_rate: int = 0


@dataclass
class HyperbandPrunerConf(PrunerConf):
    """Hyperband: several successive-halving brackets over the epochs."""
    _target_: str = "optuna.pruners.HyperbandPruner"
    min_resource: int = 1
    max_resource: Any = "auto"
    reduction_factor: int = 3


@dataclass
class ThresholdPrunerConf(PrunerConf):
    """A trial whose metric is below `lower` (or above `upper`) after the warm-up epochs stops."""
    _target_: str = "optuna.pruners.ThresholdPruner"
    lower: Optional[float] = None
    upper: Optional[float] = None
    n_warmup_steps: int = 0
    interval_steps: int = 1


PRUNERS = {"none": NopPrunerConf, "median": MedianPrunerConf, "percentile": PercentilePrunerConf,
           "successive_halving": SuccessiveHalvingPrunerConf, "hyperband": HyperbandPrunerConf,
           "threshold": ThresholdPrunerConf}


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.elasticface_optuna.optuna_sweeper.OptunaSweeper"
    defaults: List[Any] = field(default_factory=lambda: [{"pruner": "none"}])
    sampler: Any = field(default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": None})
    pruner: Any = MISSING
    direction: str = "maximize"  # the job returns its best val/acc_mean
    storage: Optional[str] = None  # null: a journal file in the sweep's folder
    study_name: str = "elasticface"
    n_trials: int = 20
    n_jobs: int = 1  # trials launched together, one launcher batch
    params: Optional[Dict[str, str]] = None


def register() -> None:
    """`hydra/sweeper=optuna` and its `hydra/sweeper/pruner` group in the config store."""
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="elasticface")
    for name, conf in PRUNERS.items():
        store.store(group="hydra/sweeper/pruner", name=name, node=conf, provider="elasticface")


register()


class OptunaSweeper(Sweeper):
    def __init__(self, sampler: Any, pruner: Any, direction: str, storage: Optional[str], study_name: str,
                 n_trials: int, n_jobs: int, params: Optional[DictConfig]) -> None:
        self.sampler, self.pruner, self.direction = sampler, pruner, direction  # instantiated by Hydra
        self.storage, self.study_name, self.n_trials, self.n_jobs = storage, study_name, n_trials, n_jobs
        self.params = params or {}
        self.crashed = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                                task_function=task_function)

    def sweep(self, arguments: List[str]) -> None:
        import optuna
        from optuna.trial import TrialState

        from elasticface.sweeps.optuna_study import TRIAL_KEY, search_space, storage
        from elasticface.utils.errors import UserError, one_line

        try:
            distributions, fixed = search_space([f"{k}={v}" for k, v in self.params.items()] + list(arguments))
        except UserError as err:
            print(f"{PROG}: error: {one_line(err)}", file=sys.stderr)
            raise SystemExit(2) from None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        study = optuna.create_study(study_name=self.study_name, storage=storage(self.storage, sweep_dir),
                                    sampler=self.sampler, pruner=self.pruner, direction=self.direction,
                                    load_if_exists=True)
        log.info("Optuna study %s (%s, pruner %s): %d of %d trials done", study.study_name,
                 self.storage or sweep_dir / "optuna.journal", type(self.pruner).__name__, len(study.trials),
                 self.n_trials)
        # an interrupted sweep's trials first, each from its checkpoints in its own folder: its job number is its
        # trial number and `resume` is not in folder names, so Hydra names the folder as it did the first time
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            job = [f"{k}={v}" for k, v in trial.params.items()] + fixed + [f"{TRIAL_KEY}={trial.number}", "resume=auto"]
            log.info("trial %d was left running: it goes on from its checkpoints", trial.number)
            self._tell(study, [trial.number], self.launcher.launch([job], initial_job_idx=trial.number))
        while len(study.trials) < self.n_trials:
            trials = [study.ask(distributions) for _ in range(min(self.n_jobs, self.n_trials - len(study.trials)))]
            jobs = [[f"{k}={v}" for k, v in t.params.items()] + fixed + [f"{TRIAL_KEY}={t.number}"] for t in trials]
            self._tell(study, [t.number for t in trials], self.launcher.launch(jobs, initial_job_idx=trials[0].number))
        self._results(study, sweep_dir)

    def _tell(self, study: Any, numbers: list[int], returns: Any) -> None:
        """Tell the study what each job left: PRUNED (its summary says the pruner stopped it), COMPLETE with the value
        it returned, or FAIL (a user's mistake returns NaN and is listed at the end; a crash is logged here)."""
        from optuna.trial import TrialState

        from elasticface.sweeps.halving import read_summary
        from elasticface.sweeps.optuna_study import pruned_why

        for number, result in zip(numbers, returns):
            crashed = getattr(result, "_return_value", None)
            output_dir = OmegaConf.select(getattr(result, "hydra_cfg", None) or {}, "hydra.runtime.output_dir")
            why = pruned_why(read_summary(Path(output_dir))) if output_dir else None
            if isinstance(crashed, BaseException):
                log.error("trial %d crashed", number, exc_info=crashed)
                self.crashed += 1
                study.tell(number, state=TrialState.FAIL)
            elif why:
                study.tell(number, state=TrialState.PRUNED)
            elif result.return_value is None or not math.isfinite(float(result.return_value)):
                study.tell(number, state=TrialState.FAIL)
            else:
                study.tell(number, float(result.return_value))

    def _results(self, study: Any, sweep_dir: Path) -> None:
        """optimization_results.yaml as Hydra's Optuna sweeper writes it, and how many trials ended each way."""
        from optuna.trial import TrialState

        counts = {state.name.lower(): len(study.get_trials(deepcopy=False, states=(state,)))
                  for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
        said = ", ".join(f"{n} {state}" for state, n in counts.items())
        results: dict[str, Any] = {"name": "optuna", "trials": counts}
        if counts["complete"]:
            best = study.best_trial
            results.update(best_params=best.params, best_value=best.value, best_trial=best.number)
            log.info("best: trial %d, %s, value %s (%s)", best.number, best.params, best.value, said)
        else:
            log.warning("no trial ran to its end (%s)", said)
        OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
        if self.crashed:
            print(f"{PROG}: error: {self.crashed} trial(s) crashed (their tracebacks are above); the others ran",
                  file=sys.stderr)
            raise SystemExit(1)
