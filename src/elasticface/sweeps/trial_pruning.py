"""A trial of an Optuna search: report each epoch's validation metric to it, stop when its pruner says so.

Built while `optuna_trial` is set, which the Optuna sweeper does for each of its jobs (sweeps/optuna_study.py).
The study, its storage and the pruner are the sweeper's (`hydra.sweeper.*` of this job's own Hydra config), so the
job judges itself by the rule the sweeper was given. The fit ends after the epoch the pruner stops; the summary
says where (`stopped_at_epoch`) and why (`pruned`), and the sweeper tells the study PRUNED.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pytorch_lightning as pl

from elasticface.sweeps.optuna_study import METRIC, TRIAL_KEY, storage, trial_of_job
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)


class TrialPruning(pl.Callback):
    def __init__(self, trial_number: int, sweeper_cfg: Any, sweep_dir: str) -> None:
        self.trial_number = int(trial_number)
        self.sweeper_cfg = sweeper_cfg
        self.sweep_dir = sweep_dir
        self.trial: Any = None
        self.reported: set[int] = set()
        self.pruner_name = ""
        self.why: str | None = None  # the pruner's reason, once it stopped this trial

    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        import optuna
        from hydra.utils import instantiate

        pruner = instantiate(self.sweeper_cfg.pruner)
        self.pruner_name = type(pruner).__name__
        study = optuna.load_study(study_name=self.sweeper_cfg.study_name, pruner=pruner,
                                  storage=storage(self.sweeper_cfg.get("storage"), self.sweep_dir))
        self.trial = trial_of_job(study, self.trial_number)
        # a trial continued after an interrupted sweep reported its first epochs already
        self.reported = set(study._storage.get_trial(self.trial._trial_id).intermediate_values)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        value = trainer.callback_metrics.get(METRIC)
        if trainer.sanity_checking or self.trial is None or value is None or not math.isfinite(float(value)):
            return
        step = trainer.current_epoch  # Optuna's pruners count steps from 0
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None else -1
        last = 0 < max_epochs <= step + 1  # a trial that ran to its end completes: nothing is left to stop
        prune = False
        if trainer.is_global_zero:  # one report per epoch, one decision that every DDP process follows
            if step not in self.reported:
                self.trial.report(float(value), step)
                self.reported.add(step)
            prune = not last and self.trial.should_prune()
        if trainer.strategy.broadcast(prune, src=0):
            trainer.should_stop = True
            self.why = (f"trial {self.trial_number}: {self.pruner_name} stopped it after epoch {step + 1}"
                        + (f" of {max_epochs}" if max_epochs > 0 else "") + f" ({METRIC} {100 * float(value):.2f}%)")
            log.info("%s", self.why)


def trial_pruning(trial_number: int) -> TrialPruning:
    """The callback for this Hydra job: its sweeper's config and folder are in the job's Hydra config."""
    from hydra.core.hydra_config import HydraConfig

    sweeper = HydraConfig.get().sweeper if HydraConfig.initialized() else {}
    if not str(sweeper.get("_target_", "")).endswith(".OptunaSweeper") or "pruner" not in sweeper:
        raise BadValue(f"{TRIAL_KEY}={trial_number}: the Optuna sweeper sets it for each of its jobs "
                       "(hparams_search=elastic_optuna); leave it out")
    return TrialPruning(trial_number, sweeper, str(HydraConfig.get().sweep.dir))
