"""Runs that survive, end to end in subprocesses: kill -9 and resume, SLURM preemption, resume=auto.

The oracle is the same run never interrupted: every logged train/loss from the resumed step on and the
final val/acc_mean must be equal bit for bit (CPU, same seed), with and without loader worker processes.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY
from helpers.self_signal import SelfSignal

pytestmark = pytest.mark.slow

# 8 identities x 6 images, batch 16: 3 steps per epoch, a resumable checkpoint every 2 steps
COMMON = [*TINY, "trainer.max_epochs=6", "pixel_baseline=false", "checkpoint.keep=100"]


def train_cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), *COMMON, f"hydra.run.dir={run_dir}", *overrides]


def env(**extra: str) -> dict[str, str]:
    out = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **extra)
    return out


def losses(metrics_csv: Path) -> dict[int, str]:
    """step -> train/loss exactly as the CSV logger wrote it (the text: bit-identical floats print equal)."""
    with open(metrics_csv) as f:
        return {int(row["step"]): row["train/loss"] for row in csv.DictReader(f) if row.get("train/loss")}


def start(cmd: list[str], log: Path, environment: dict[str, str]) -> subprocess.Popen:
    """A training process whose output goes to a file (a pipe nobody reads could fill and block it)."""
    return subprocess.Popen(cmd, cwd=ROOT, env=environment, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def wait_for(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(
                f"the run ended (exit {proc.returncode}) before {path.name} appeared: {log.read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear in {timeout} s")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, Path]:
    """The uninterrupted runs, with 0 and 2 loader workers."""
    runs = {}
    for workers in (0, 2):
        run_dir = tmp_path_factory.mktemp(f"reference_w{workers}")
        out = subprocess.run(train_cmd(run_dir, f"data.num_workers={workers}"), cwd=ROOT, env=env(),
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        runs[workers] = run_dir
    return runs


def assert_same_run(resumed_dir: Path, reference_dir: Path, resumed_csv: Path, from_step: int) -> None:
    expected, got = losses(reference_dir / "csv" / "version_0" / "metrics.csv"), losses(resumed_csv)
    steps = sorted(s for s in got if s >= from_step)
    assert steps and steps[-1] == max(expected), (steps, max(expected))
    for step in steps:
        assert got[step] == expected[step], (
            f"train/loss at step {step}: resumed {got[step]} vs uninterrupted {expected[step]}"
        )
    ref_summary = json.loads((reference_dir / "summary.json").read_text())
    summary = json.loads((resumed_dir / "summary.json").read_text())
    assert summary["val/acc_mean"]["final"] == ref_summary["val/acc_mean"]["final"]
    assert summary["global_step"] == ref_summary["global_step"]


@pytest.mark.parametrize("workers", [0, 2])
def test_kill_9_mid_epoch_then_resume_is_the_uninterrupted_run(reference, tmp_path, workers):
    run_dir = tmp_path / "run"
    log = tmp_path / "killed.log"
    proc = start(train_cmd(run_dir, f"data.num_workers={workers}"), log, env())
    wait_for(run_dir / "checkpoints" / "step0000008.ckpt", proc, log)  # step 8 = second batch of epoch 3
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists()
    last = run_dir / "checkpoints" / "last.ckpt"
    resumed_from = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    assert 6 <= resumed_from < 18  # a kill between the step file and last.ckpt leaves the previous last.ckpt

    out = subprocess.run(train_cmd(run_dir, f"data.num_workers={workers}", f"ckpt_path={last}"), cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_run(run_dir, reference[workers], run_dir / "csv" / "version_1" / "metrics.csv", resumed_from)


def test_slurm_signal_checkpoints_requeues_and_resume_auto_finishes_then_skips(reference, tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "scontrol_calls.txt"
    scontrol = fake_bin / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    scontrol.chmod(0o755)
    slurm = env(PATH=f"{fake_bin}:{os.environ['PATH']}", SLURM_JOB_ID="4242", SLURM_JOB_NAME="train",
                SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NODELIST="localhost")
    run_dir = tmp_path / "run"
    log = tmp_path / "preempted.log"
    proc = start(train_cmd(run_dir, "resume=auto"), log, slurm)
    wait_for(run_dir / "checkpoints" / "step0000004.ckpt", proc, log)
    proc.send_signal(signal.SIGUSR1)  # what `sbatch --signal=USR1@120` sends before the time limit
    proc.wait(timeout=300)
    output = log.read_text()
    assert proc.returncode == 0, output[-3000:]
    assert "preempted at step" in output
    assert calls.read_text().split() == ["requeue", "4242"]
    assert not (run_dir / "summary.json").exists(), "a preempted run is not finished"
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    hpc = torch.load(run_dir / "hpc_ckpt_1.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == hpc["global_step"] >= 4, "both written at the same step boundary"

    # the requeued job: the same command in the same directory continues and finishes the run exactly
    out = subprocess.run(train_cmd(run_dir, "resume=auto"), cwd=ROOT, env=slurm, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_run(run_dir, reference[0], run_dir / "csv" / "version_1" / "metrics.csv", last["global_step"])

    # started once more: finished, so skipped (no training, no new log version)
    out = subprocess.run(train_cmd(run_dir, "resume=auto"), cwd=ROOT, env=slurm, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finished already" in out.stderr + out.stdout
    assert not (run_dir / "csv" / "version_2").exists()


def test_a_signal_at_an_epochs_last_step_checkpoints_after_its_validation_and_resumes_exactly(reference, tmp_path):
    """SLURM's warning can land on any step: on an epoch's last one (step 3 of 3) the checkpoint waits for the
    epoch's validation; written before it, Lightning resumed one epoch late (found on a real cluster)."""
    run_dir = tmp_path / "run"
    signalled = [f"+callbacks.self_signal._target_={SelfSignal.__module__}.SelfSignal",
                 "+callbacks.self_signal.at_step=2", "checkpoint.preemption_signal=SIGUSR2"]  # seen after step 3
    with_helpers = {**env(), "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}"}
    out = subprocess.run(train_cmd(run_dir, *signalled), cwd=ROOT, env=with_helpers, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "preempted at step 3" in out.stderr + out.stdout, out.stderr[-3000:]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 3
    out = subprocess.run(train_cmd(run_dir, "resume=auto"), cwd=ROOT, env=env(), capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_run(run_dir, reference[0], run_dir / "csv" / "version_1" / "metrics.csv", 3)
