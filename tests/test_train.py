"""End-to-end: the training job, resume, and a four-job multirun, on tiny synthetic faces."""

import json
import subprocess
import sys

import pytest
import torch
import yaml

from conftest import ROOT, TINY
from elasticface.training import build_module, run

# debug=tiny's 8 classes at the default scale=class_count: AdaCos's sqrt(2)·ln(C - 1), written out
S_8_CLASSES = 2.751932523953475


def test_run_writes_summary_and_checkpoints(tiny_cfg, tmp_path):
    summary = run(tiny_cfg("head=elastic_arc_plus"))
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["val/acc_mean"]["final"] == summary["val/acc_mean"]["final"]
    for key in ("baseline/pixel_acc", "train_seconds", "images_per_second", "m", "s", "sigma", "head", "backbone",
                "data"):
        assert saved[key] is not None, key
    assert (saved["m"], saved["sigma"]) == (0.5, 0.0175) and saved["s"] == pytest.approx(S_8_CLASSES, rel=1e-12)
    assert saved["compile"] is False and saved["compiled"] is False  # debug=tiny trains eagerly
    assert saved["compiled_steps"] == {"compiled": 0, "eager": 0}  # nothing compiled to count
    acc_mean = saved["val/acc_mean"]
    assert 0.0 <= acc_mean["best"] <= 1.0 and acc_mean["best"] >= acc_mean["final"]
    assert saved["images_per_second"] > 0
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert "last.ckpt" in ckpts and any(name.startswith("step") for name in ckpts)
    metrics = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0].split(",")
    for name in ("train/loss", "train/margin_mean", "train/margin_std", "val/acc_mean", "val/acc_mean_best",
                 "val/synthetic/acc"):
        assert name in metrics, name
    hparams = yaml.safe_load((tmp_path / "csv" / "version_0" / "hparams.yaml").read_text())
    assert hparams["sigma"] == 0.0175 and hparams["m"] == 0.5 and hparams["s"] == pytest.approx(S_8_CLASSES)
    assert hparams["scale"] == "class_count"


def test_resume_continues_step_count_optimizer_and_margin_rng(tiny_cfg, tmp_path):
    run(tiny_cfg("trainer.max_epochs=1"))
    first = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    steps_per_epoch = first["global_step"]
    assert steps_per_epoch > 0
    head_state = {k: v for k, v in first["state_dict"].items() if k.startswith("classifier.head.")}
    assert any(k.endswith("_extra_state") for k in head_state), "margin RNG state must be in the checkpoint"
    resumed = run(tiny_cfg("trainer.max_epochs=2", f"ckpt_path={tmp_path / 'checkpoints' / 'last.ckpt'}"))
    assert resumed["global_step"] == 2 * steps_per_epoch
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").exists(), "the first run's logs survive the resume"
    assert (tmp_path / "csv" / "version_1" / "metrics.csv").exists()
    final = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert final["global_step"] == 2 * steps_per_epoch
    assert final["lr_schedulers"][0]["last_epoch"] == 2 * steps_per_epoch
    assert final["optimizer_states"][0]["state"], "momentum buffers are saved"


@pytest.mark.slow  # a 4-job sweep as typed; make test runs the README's sweep verbatim
def test_multirun_four_jobs_each_in_its_own_directory(tmp_path):
    """As a user types it, from a fresh working directory: the sweep lands in ./logs/train/multiruns/<time>."""
    overrides = TINY + ["trainer.max_steps=2", "trainer.max_epochs=1"]
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "head=elastic_arc,elastic_arc_plus", "sigma=0.0125,0.025",
           *overrides]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(jobs) == 4, [p.name for p in jobs]
    seen = set()
    for job in jobs:
        assert "head=" in job.name and "sigma=" in job.name
        summary = json.loads((job / "summary.json").read_text())
        hparams = yaml.safe_load((job / "csv" / "version_0" / "hparams.yaml").read_text())
        assert hparams["sigma"] == summary["sigma"] and hparams["choice/head"] == summary["head"]
        assert hparams["m"] == 0.5 and hparams["s"] == pytest.approx(S_8_CLASSES) == summary["s"]
        assert summary["val/acc_mean"]["final"] is not None, "stopped mid-epoch, still validated at the end"
        seen.add((summary["head"], summary["sigma"]))
    assert seen == {(h, s) for h in ("elastic_arc", "elastic_arc_plus") for s in (0.0125, 0.025)}


def test_all_loggers_offline_without_network(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = tiny_cfg("logger=many", "trainer.max_epochs=1")
    assert cfg.logger.wandb.mode == "offline"
    run(cfg)
    assert list((tmp_path / "wandb").glob("offline-run-*")), "W&B wrote an offline run"
    assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").exists()


@pytest.mark.slow
def test_ddp_two_cpu_processes(tmp_path):
    """DDP on CPU (gloo): every rank evaluates its share of the pairs; the metric gathers them all."""
    cmd = [sys.executable, str(ROOT / "train.py"), *TINY, "trainer.accelerator=cpu", "trainer.devices=2",
           "trainer.strategy=ddp", "extras.print_config=full"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] > 0 and 0.0 <= summary["val/acc_mean"]["final"] <= 1.0
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    assert out.stdout.count("task_name") == 1, "the config is printed once, by rank 0"
    assert out.stdout.count("this run:") == 1, "and the run's overview"


def test_margin_statistics_are_written_on_every_logging_step(tiny_cfg, tmp_path):
    """They are computed only on the steps the loggers write (the mask would sync the device every step)."""
    import csv

    run(tiny_cfg("head=elastic_cos_plus", "trainer.log_every_n_steps=2", "trainer.max_epochs=2"))
    rows = list(csv.DictReader((tmp_path / "csv" / "version_0" / "metrics.csv").open()))
    loss_steps = [r["step"] for r in rows if r.get("train/loss")]
    margin_steps = [r["step"] for r in rows if r.get("train/margin_mean")]
    assert len(loss_steps) >= 2 and margin_steps == loss_steps
    assert all(float(r["train/margin_std"]) > 0 for r in rows if r.get("train/margin_std"))


def test_lightnings_hook_name_is_a_plain_attribute_and_submodules_still_register(tiny_cfg):
    """Lightning sets `_current_fx_name` at every hook: it skips nn.Module's checks, every other name keeps them."""
    model = build_module(tiny_cfg(), num_classes=8)
    model._current_fx_name = "training_step"
    assert model._current_fx_name == model.__dict__["_current_fx_name"] == "training_step"
    model.extra = torch.nn.Linear(2, 2)
    assert "extra" in model._modules and "extra" not in model.__dict__
    model.scale = torch.nn.Parameter(torch.ones(1))
    assert "scale" in model._parameters
