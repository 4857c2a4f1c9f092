"""The sweep and launcher configs run (Optuna, joblib) or compose (SLURM, which needs a cluster)."""

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
