"""Successive halving over any multirun: `halving.eta=3 halving.first_epochs=2` on a `-m` command line.

Every job of the sweep trains to the first budget (epochs), the jobs are ranked on `halving.metric` at that
point, the best 1/eta go on from their own checkpoints to eta times the budget, and so on until
`trainer.max_epochs` (4 jobs, eta 2, first 1 of 4 epochs: 4 jobs train 1 epoch, 2 go on to 2, 1 to 4). A job
keeps one folder: a stopped job's summary.json says after which epoch and why (`halving`), and the sweep's
`halving.json` holds the rounds, so a sweep interrupted between rounds, started again with the same command and
`hydra.sweep.dir=<that sweep>`, goes on with the round it was in.

The job's side is callbacks/epoch_budget.py (the fit ends at `halving.stop_epoch`, the schedule stays the full
run's) and checkpointing/resume.py (a job stopped short of its new budget continues); the sweeper that launches the
rounds is hydra_plugins/elasticface_halving. This module is the rule: the budgets, the ranking, the record.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from elasticface.utils.errors import BadValue, UserError
from elasticface.utils.output_paths import atomic_write

#: the sweep's record, in its folder
STATE_FILE = "halving.json"
#: the overrides the sweeper adds to a job (left out of the job's folder name: configs/hydra/default.yaml)
STOP_KEY = "halving.stop_epoch"
METRIC = re.compile(r"^val/(acc_mean|[^/]+/acc)$")


@dataclass(frozen=True)
class Plan:
    eta: int
    budgets: tuple[int, ...]  # the epoch each round ends at; the last is trainer.max_epochs
    metric: str

    @property
    def max_epochs(self) -> int:
        return self.budgets[-1]

    def as_dict(self) -> dict[str, Any]:
        return {"eta": self.eta, "budgets": list(self.budgets), "metric": self.metric}


def plan(cfg: DictConfig) -> Plan | None:
    """The rounds `cfg`'s `halving` asks for, or None when it is off (`halving.eta` null); a value that cannot make
    rounds raises one BadValue naming it."""
    eta = OmegaConf.select(cfg, "halving.eta", default=None)
    if eta is None:
        return None
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 2:
        raise BadValue(f"halving.eta={eta}: expected an integer >= 2, the best 1/eta of the jobs go on after each "
                       "round (2: half, 3: a third); null: no halving")
    first = OmegaConf.select(cfg, "halving.first_epochs", default=None)
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        raise BadValue(f"halving.first_epochs={first}: expected a whole number of epochs >= 1, the first round's "
                       "budget")
    max_epochs = OmegaConf.select(cfg, "trainer.max_epochs", default=None)
    if not isinstance(max_epochs, int) or max_epochs < 1:
        raise BadValue(f"trainer.max_epochs={max_epochs}: successive halving counts its budgets in epochs, so the "
                       "full run needs a number of epochs")
    if first >= max_epochs:
        raise BadValue(f"halving.first_epochs={first}: not shorter than the full run (trainer.max_epochs="
                       f"{max_epochs}); the first budget must stop the jobs before their end")
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=-1)
    if max_steps not in (None, -1):
        raise BadValue(f"trainer.max_steps={max_steps}: successive halving counts epochs; a step limit would end "
                       "the jobs before their last round (trainer.max_steps=-1)")
    metric = str(OmegaConf.select(cfg, "halving.metric", default="val/acc_mean"))
    if not METRIC.match(metric):
        raise BadValue(f"halving.metric={metric}: expected val/acc_mean or val/<set>/acc (a validation set's "
                       "accuracy in summary.json)")
    names = OmegaConf.select(cfg, "data.val_sets.names", default=None)
    named = metric.split("/")[1]
    if metric != "val/acc_mean" and OmegaConf.is_list(names) and named not in list(names):
        raise BadValue(f"halving.metric={metric}: no validation set {named!r}; the sets: "
                       f"{', '.join(map(str, names))} (or val/acc_mean, their mean)")
    budgets = []
    budget = first
    while budget < max_epochs:
        budgets.append(budget)
        budget *= eta
    return Plan(eta, tuple(budgets + [max_epochs]), metric)


def check_command_line(cfg: DictConfig, overrides: list[str], multirun: bool) -> None:
    """What only the command line shows: `halving.eta` without -m (one run has nothing to rank), and a halving key
    given several values (the rounds rank every job of one sweep together)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    swept = [o.get_key_element() for o in OverridesParser.create().parse_overrides(overrides)
             if o.get_key_element().startswith("halving.") and o.is_sweep_override()]
    if swept:
        raise BadValue(f"{swept[0]}: takes one value per sweep (the rounds rank all its jobs together); run one "
                       "sweep per value")
    eta = OmegaConf.select(cfg, "halving.eta", default=None)
    if eta is not None and not multirun:
        raise BadValue(f"halving.eta={eta}: successive halving ranks the jobs of a sweep; add -m and the values to "
                       "sweep (python train.py -m seed=1,2,3,4 halving.eta=2), or halving.eta=null for one run")
    sweeper = str(OmegaConf.select(cfg, "hydra.sweeper._target_", default=""))
    if eta is not None and sweeper and not sweeper.endswith(".HalvingSweeper"):
        raise BadValue(f"halving.eta={eta}: this sweep's sweeper ({sweeper.rsplit('.', 1)[-1]}) runs its own trials, "
                       "not halving rounds; halving works on grids (the basic sweeper: key=a,b,c)")


def kept(count: int, eta: int) -> int:
    """How many of `count` ranked jobs go on: the best 1/eta, at least one."""
    return max(1, count // eta)


def metric_value(summary: dict[str, Any] | None, metric: str) -> float | None:
    """`metric` from a job's summary.json (None: no summary, or no accuracy: a failed job); a summary that lacks the
    metric altogether is the sweep's mistake, not the job's."""
    if summary is None:
        return None
    if metric == "val/acc_mean":
        value = (summary.get("val/acc_mean") or {}).get("final")
    else:
        sets = summary.get("val/sets") or {}
        name = metric.split("/")[1]
        if name not in sets:
            raise BadValue(f"halving.metric={metric}: the jobs' summary.json has no set {name!r}; its sets: "
                           f"{', '.join(sets) or 'none'} (or val/acc_mean)")
        value = sets[name]
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def rank(values: dict[int, float | None]) -> list[int]:
    """Job indices best first by their value; a job without one (failed) last; ties in job order."""
    return sorted(values, key=lambda i: (values[i] is None, -(values[i] or 0.0), i))


def read_summary(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def why_failed(folder: Path) -> str:
    """A job without a result: its own error line (failed.json) or what is missing."""
    try:
        return str(json.loads((folder / "failed.json").read_text())["error"])
    except (OSError, ValueError, KeyError, TypeError):
        return "no summary.json (it crashed or was cancelled; its log says why)" if folder.is_dir() else \
            f"{folder} was never written"


@dataclass
class State:
    """halving.json: the plan, each job's overrides and folder, and each finished round's ranking."""

    plan: Plan
    jobs: list[list[str]]
    folders: dict[int, str]
    rounds: list[dict[str, Any]]

    def alive(self) -> list[int]:
        """The jobs the next round trains: every job before the first round, else the last round's kept ones."""
        return list(self.rounds[-1]["kept"]) if self.rounds else list(range(len(self.jobs)))

    def epochs_trained(self) -> int:
        """Job-epochs the finished rounds cost (the full grid: jobs x max_epochs)."""
        spent, start = 0, 0
        for record in self.rounds:
            spent += len(record["ranked"]) * (record["budget"] - start)
            start = record["budget"]
        return spent

    def as_dict(self) -> dict[str, Any]:
        return {**self.plan.as_dict(), "jobs": [{"overrides": o, "folder": self.folders.get(i)}
                                                for i, o in enumerate(self.jobs)],
                "rounds": self.rounds, "epochs_trained": self.epochs_trained(),
                "epochs_full_grid": len(self.jobs) * self.plan.max_epochs}

    def save(self, sweep_dir: Path) -> None:
        atomic_write(sweep_dir / STATE_FILE, json.dumps(self.as_dict(), indent=2) + "\n")


def load_state(sweep_dir: Path, plan_now: Plan, jobs: list[list[str]]) -> State:
    """The sweep's record in `sweep_dir`, or a new one; a record of another plan or grid is refused (it cannot be
    continued by this command)."""
    path = sweep_dir / STATE_FILE
    if not path.is_file():
        return State(plan_now, jobs, {}, [])
    try:
        saved = json.loads(path.read_text())
        saved_plan = Plan(int(saved["eta"]), tuple(int(b) for b in saved["budgets"]), str(saved["metric"]))
        saved_jobs = [list(j["overrides"]) for j in saved["jobs"]]
        folders = {i: j["folder"] for i, j in enumerate(saved["jobs"]) if j.get("folder")}
        rounds = list(saved["rounds"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path}: unreadable ({err}); move it away to start the halving of this sweep again") from None
    if saved_plan != plan_now:
        raise BadValue(f"{path}: this sweep ran with halving {saved_plan.as_dict()}, the command line asks for "
                       f"{plan_now.as_dict()}; continue it with the same values, or give another hydra.sweep.dir")
    if saved_jobs != jobs:
        raise BadValue(f"{path}: this sweep's {len(saved_jobs)} jobs are not the command line's {len(jobs)}; continue "
                       "it with the same sweep values, or give another hydra.sweep.dir")
    return State(plan_now, jobs, folders, rounds)


def finish_round(state: State, sweep_dir: Path, budget: int, alive: list[int]) -> dict[str, Any]:
    """Rank the round's jobs on their summaries, keep the best 1/eta (all of them in the last round), record it and
    write into each stopped job's summary.json where and why it stopped. Returns the round's record."""
    plan_ = state.plan
    last = budget == plan_.max_epochs
    summaries = {i: read_summary(sweep_dir / state.folders[i]) if i in state.folders else None for i in alive}
    values = {i: metric_value(summaries[i], plan_.metric) for i in alive}
    order = rank(values)
    scored = [i for i in order if values[i] is not None]  # a failed job never goes on
    keep = scored if last else scored[:kept(len(order), plan_.eta)]
    number = len(state.rounds) + 1
    record = {"round": number, "budget": budget, "kept": keep,
              "ranked": [{"job": i, "folder": state.folders.get(i), plan_.metric: values[i],
                          **({} if values[i] is not None else
                             {"failed": why_failed(sweep_dir / state.folders[i]) if i in state.folders
                              else "never started"})} for i in order]}
    state.rounds.append(record)
    for place, i in enumerate(order, start=1):
        summary = summaries[i]
        if summary is None:
            continue
        value = "no accuracy" if values[i] is None else f"{100 * values[i]:.2f}%"
        went_on = i in keep
        summary["halving"] = {
            **plan_.as_dict(), "round": number, "rounds": len(plan_.budgets), "epoch": budget, "rank": place,
            "jobs": len(order), "went_on": went_on and not last,
            "why": (f"went through all {number} rounds to epoch {budget}: {plan_.metric} {value} ranked {place} of "
                    f"{len(order)} in the last" if last else
                    f"round {number} of {len(plan_.budgets)}: {plan_.metric} {value} after epoch {budget} ranked "
                    f"{place} of {len(order)}; the best {len(keep)} went on"
                    + ("" if went_on else f", so it stopped here ({budget} of {plan_.max_epochs} epochs)"))}
        atomic_write(sweep_dir / state.folders[i] / "summary.json", json.dumps(summary, indent=2, default=str))
    state.save(sweep_dir)
    return record


def final_ranking(state: State) -> list[int]:
    """Every job, best first: those that went further before those stopped earlier, each round's by its metric."""
    order: list[int] = []
    for record in reversed(state.rounds):
        order += [r["job"] for r in record["ranked"] if r["job"] not in order]
    return order + [i for i in range(len(state.jobs)) if i not in order]
