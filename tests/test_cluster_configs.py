"""The sweep and launcher configs run (Optuna, joblib) or compose (SLURM, which needs a cluster)."""

import os
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import ROOT, TINY


def train(*args: str, cwd) -> subprocess.CompletedProcess:
    """`python train.py ARGS` as a user runs it from `cwd` (outputs under cwd/logs, no hydra.*.dir)."""
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def sweep_dir(cwd):
    (sweep,) = (cwd / "logs" / "train" / "multiruns").iterdir()
    return sweep


@pytest.mark.slow
def test_optuna_search_over_m_and_sigma_reports_the_best_trial(tmp_path):
    train("-m", "hparams_search=elastic_optuna", "hydra.sweeper.n_trials=2", *TINY, "trainer.max_steps=2",
          "trainer.max_epochs=1", cwd=tmp_path)
    result = yaml.safe_load((sweep_dir(tmp_path) / "optimization_results.yaml").read_text())
    assert set(result["best_params"]) == {"m", "sigma"} and 0.0 <= result["best_value"] <= 1.0
    assert len([p for p in sweep_dir(tmp_path).iterdir() if (p / "summary.json").exists()]) == 2


@pytest.mark.slow
def test_joblib_launcher_runs_jobs_in_parallel_processes(tmp_path):
    train("-m", "launcher=joblib", "head=arcface,cosface", *TINY, "trainer.max_steps=2", "trainer.max_epochs=1",
          cwd=tmp_path)
    assert len([p for p in sweep_dir(tmp_path).iterdir() if (p / "summary.json").exists()]) == 2


def test_slurm_launcher_composes_with_ddp_on_four_gpus(tmp_path):
    out = train("launcher=slurm", "experiment=ms1mv2_r100_elastic_arc", "data.root=/data/faces_emore", "--cfg", "all",
                cwd=tmp_path)
    cfg = OmegaConf.create(out.stdout)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.gpus_per_node == cfg.trainer.devices == 4 and cfg.trainer.strategy == "ddp"


#: the README's local-cluster requests (one CPU task, no GPU)
CPU_JOB = ["trainer=cpu", "hydra.launcher.tasks_per_node=1", "hydra.launcher.gpus_per_node=0",
           "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2"]


def refused(*args: str, cwd, path: str | None = None) -> list[str]:
    """A SLURM sweep that must stop before any job is queued: its error lines (exit status 2)."""
    env = {**os.environ, **({"PATH": path} if path is not None else {})}
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "launcher=slurm", *CPU_JOB, *TINY, *args],
                         cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert not (cwd / "logs" / "train" / "multiruns").exists() or not list(
        (cwd / "logs" / "train" / "multiruns").glob("*/.submitit")), "nothing is submitted"
    return [line for line in (out.stdout + out.stderr).splitlines() if "error" in line.lower()]


def test_slurm_sweep_without_sbatch_on_path_is_one_line(tmp_path):
    (line,) = refused(cwd=tmp_path, path=str(tmp_path))
    assert line.startswith("elasticface-train: error: launcher=slurm: no `sbatch` on PATH"), line


def test_slurm_time_limit_within_the_signal_delay_is_one_line_naming_both_keys(tmp_path):
    (line,) = refused("hydra.launcher.timeout_min=2", cwd=tmp_path, path=str(tmp_path))
    assert line.startswith("elasticface-train: error: hydra.launcher.timeout_min=2 (120 s) is not longer than "
                           "hydra.launcher.signal_delay_s=120"), line


@pytest.mark.parametrize("said, key", [
    ("Invalid partition name specified", "partition"),
    ("Invalid account or account/partition combination specified", "account"),
    ("Requested time limit is invalid (missing or exceeds some limit)", "timeout_min"),
    ("Invalid generic resource (gres) specification", "gpus_per_node"),
    ("Invalid qos specification", "qos"),
    ("Requested node configuration is not available", ""),
])
def test_sbatch_refusals_name_the_launcher_key(said, key):
    from elasticface.utils.slurm_checks import refused_key

    assert refused_key(said) == key
