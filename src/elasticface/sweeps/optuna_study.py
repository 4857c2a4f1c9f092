"""Optuna searches that stop weak trials: `hparams_search=elastic_optuna hydra/sweeper/pruner=median`.

Hydra's own Optuna sweeper (hydra-optuna-sweeper) tells Optuna a trial's result only when its job has ended, so no
pruner can act, and it pins Optuna 2, whose database storage fails with SQLAlchemy 2. This project's sweeper
(hydra_plugins/elasticface_optuna) keeps the study where every job reaches it (a journal file in the sweep's folder
unless `hydra.sweeper.storage` names a database) and passes each job its trial number (`optuna_trial`). The job
(sweeps/trial_pruning.py) reports its validation metric after every epoch to that trial and ends the fit when the
sweeper's pruner says so; its summary.json says where and why (`pruned`). The sweeper then tells the study PRUNED,
COMPLETE or FAIL. A sweep interrupted mid-trial, started again with the same command and `hydra.sweep.dir=<that
sweep>`, first finishes the trials left running, each from its own last checkpoint in its own folder.

This module is what both sides share: the search space from Hydra's sweep grammar, where the study lives, the
trial a job reports to, and what a job's summary says about its trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elasticface.utils.errors import BadValue

#: the key the sweeper sets on each job's command line
TRIAL_KEY = "optuna_trial"
#: the metric reported after each epoch: the one whose best value the job returns as the trial's objective
METRIC = "val/acc_mean"
JOURNAL = "optuna.journal"


def search_space(overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Optuna distributions from Hydra's sweep grammar (`m=interval(0.3,0.6)`, `lr=tag(log,interval(1e-4,1e-1))`,
    `head=choice(arcface,cosface)` or `head=arcface,cosface`, `epochs=range(2,10,2)`), and the overrides that
    are fixed values, as typed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    distributions: dict[str, Any] = {}
    fixed: list[str] = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key, value = override.get_key_element(), override.value()
        if not override.is_sweep_override():
            fixed.append(override.input_line)
        elif isinstance(value, IntervalSweep):
            log = "log" in value.tags
            if isinstance(value.start, int) and isinstance(value.end, int):
                distributions[key] = IntDistribution(value.start, value.end, log=log)
            else:
                distributions[key] = FloatDistribution(float(value.start), float(value.end), log=log)
        elif isinstance(value, RangeSweep):
            numbers = [value.start, value.stop, value.step]
            if all(isinstance(n, int) for n in numbers):  # Hydra's range stops before `stop`
                distributions[key] = IntDistribution(value.start, value.stop - value.step, step=value.step)
            else:
                distributions[key] = CategoricalDistribution(list(override.sweep_iterator()))
        elif isinstance(value, ChoiceSweep):
            distributions[key] = CategoricalDistribution(list(override.sweep_iterator()))
        else:
            raise BadValue(f"{override.input_line}: an Optuna search takes interval(a,b), range(a,b,step), "
                           "choice(a,b) or a,b for a searched key")
    return distributions, fixed


def storage(url: str | None, sweep_dir: str | Path) -> Any:
    """The study's storage: the database `hydra.sweeper.storage` names (sqlite:///..., postgresql://...), else a
    journal file in the sweep's folder, which Optuna writes safely from many processes, a cluster's shared file
    system included."""
    import optuna

    if url:
        return str(url)
    path = Path(sweep_dir).resolve() / JOURNAL
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def trial_of_job(study: Any, number: int) -> Any:
    """The running trial `number` of `study`, as the job reports to it (Optuna's Trial for an id of its storage)."""
    import optuna

    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    return optuna.trial.Trial(study, trial_id)


def pruned_why(summary: dict[str, Any] | None) -> str | None:
    """The pruner's reason when the job's summary.json says its trial was pruned, else None."""
    return ((summary or {}).get("pruned") or {}).get("why")
