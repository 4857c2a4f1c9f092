"""Optuna searches with a pruner (`hparams_search=elastic_optuna hydra/sweeper/pruner=...`): each job reports its
validation accuracy per epoch to its trial, stops when the pruner says so, and the study records the trial PRUNED;
a sweep killed mid-trial goes on with that trial from its checkpoints. The median rule is checked against Optuna's
documented rule written out here, not against the code's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, TINY

optuna = pytest.importorskip("optuna")
SEARCH = ["hparams_search=elastic_optuna", *TINY]


def _sweep(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _study(sweep: Path):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal")))
    return optuna.load_study(study_name="elastic_m_sigma", storage=storage)


def _folders(sweep: Path) -> dict[int, Path]:
    return {int(p.name.split("_", 1)[0]): p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")}


def test_a_pruned_trial_stops_after_the_epoch_its_pruner_names_and_the_study_says_pruned(tmp_path):
    """As typed from a fresh folder, with a threshold no accuracy reaches: every trial reports epoch 1, is stopped
    there (1 of 2 epochs), says why in its summary.json, and the study holds it PRUNED with that one value."""
    out = _sweep([*SEARCH, "hydra.sweeper.n_trials=2", "trainer.max_epochs=2", "hydra/sweeper/pruner=threshold",
                  "hydra.sweeper.pruner.lower=1.01"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    trials = _study(sweep).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.PRUNED] * 2
    folders = _folders(sweep)
    assert sorted(folders) == [0, 1] and all("optuna_trial" not in p.name for p in folders.values())
    for trial in trials:
        summary = json.loads((folders[trial.number] / "summary.json").read_text())
        assert (summary["epochs"], summary["stopped_at_epoch"]) == (1, 1)
        assert summary["pruned"]["why"].startswith(f"trial {trial.number}: ThresholdPruner stopped it after epoch 1 "
                                                   "of 2 (val/acc_mean ")
        assert trial.intermediate_values == {0: summary["val/acc_mean"]["final"]}
        assert trial.params == {"m": summary["m"], "sigma": summary["sigma"]}
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["trials"] == {"complete": 0, "pruned": 2, "fail": 0} and "best_value" not in results
    report = subprocess.run([sys.executable, "-m", "elasticface.cli.report", str(sweep)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0 and "Stopped early by successive halving or a pruner (2)" in report.stdout


def _median_rule_stops(trial, earlier_complete, n_startup: int, warmup: int, last: int) -> int | None:
    """Optuna's MedianPruner for a maximised value, from its documentation: once `n_startup` trials have completed,
    a trial stops at the first step past `warmup` where its best value so far is below the median of the completed
    trials' values at that step. The job asks after every epoch but its `last`: a trial that ran to its end
    completes."""
    if len(earlier_complete) < n_startup:
        return None
    best = -np.inf
    for step in sorted(s for s in trial.intermediate_values if s < last):
        best = max(best, trial.intermediate_values[step])
        others = [t.intermediate_values[step] for t in earlier_complete if step in t.intermediate_values]
        if step >= warmup and others and best < np.median(others):
            return step
    return None


@pytest.mark.slow  # two searches of 4 trials
def test_the_median_pruner_stops_the_trials_its_rule_names_and_the_best_trial_is_a_complete_one(tmp_path):
    out = _sweep([*SEARCH, "hydra.sweeper.n_trials=4", "trainer.max_epochs=3", "hydra/sweeper/pruner=median",
                  "hydra.sweeper.pruner.n_startup_trials=1", "hydra.sweeper.pruner.n_warmup_steps=0"], tmp_path, 900)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    trials = _study(sweep).trials
    folders = _folders(sweep)
    for trial in trials:
        done = [t for t in trials if t.number < trial.number and t.state == optuna.trial.TrialState.COMPLETE]
        stop = _median_rule_stops(trial, done, n_startup=1, warmup=0, last=2)
        summary = json.loads((folders[trial.number] / "summary.json").read_text())
        if stop is None:
            assert trial.state == optuna.trial.TrialState.COMPLETE and sorted(trial.intermediate_values) == [0, 1, 2]
            assert summary["stopped_at_epoch"] is None and trial.value == summary["val/acc_mean"]["best"]
        else:
            assert trial.state == optuna.trial.TrialState.PRUNED and max(trial.intermediate_values) == stop
            assert summary["stopped_at_epoch"] == stop + 1 and "MedianPruner" in summary["pruned"]["why"]
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert best["best_value"] == max(t.value for t in complete)


@pytest.mark.slow  # a search killed mid-trial, then run again
def test_a_search_killed_mid_trial_goes_on_with_that_trial_from_its_checkpoints(tmp_path):
    """Killed once trial 1 has written a checkpoint, the same command with hydra.sweep.dir=<that sweep> continues
    trial 1 in its folder (trial 0 is not run again) and the study ends with 2 complete trials."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", *SEARCH, "hydra.sweeper.n_trials=2", "trainer.max_epochs=3",
           f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if list(sweep.glob("1_*/checkpoints/last.ckpt")):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "killed during trial 1"
    assert [t.state.name for t in _study(sweep).trials] == ["COMPLETE", "RUNNING"]
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "trial 1 was left running: it goes on from its checkpoints" in again.stdout
    trials = _study(sweep).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert sorted(trials[1].intermediate_values) == [0, 1, 2]
    folders = _folders(sweep)
    assert sorted(folders) == [0, 1]
    assert len(list((folders[0] / "csv").glob("version_*"))) == 1, "trial 0 ran once"
    log = (folders[1] / "train.log").read_text()
    assert "resum" in log.lower(), log[-2000:]
