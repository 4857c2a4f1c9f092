"""A run resumed at another global batch keeps its schedule in images seen (batch scaling on), or says before the
first step that it jumps (scaling off). The global batch changes here through data.batch_size, on one CPU process;
another world size changes it the same way (trainer.devices x trainer.num_nodes x data.batch_size)."""

import csv
import logging

import pytest
import torch

from conftest import TINY, compose_train

from elasticface.training import run

#: the schedule is written for a global batch of 16: lr 0.1, x 0.1 after 4 steps, 6 steps in all
SCHEDULE = ["batch_scaling.reference_batch=16", "scheduler=multistep", "scheduler.milestones=[4]",
            "scheduler.milestone_fractions=[]", "trainer.max_epochs=-1", "trainer.max_steps=6",
            "checkpoint.every_n_steps=2", "pixel_baseline=false", "trainer.check_val_every_n_epoch=null",
            "trainer.val_check_interval=100"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """Four steps at global batch 16 (64 images), then stopped: its step-4 checkpoint."""
    out = tmp_path_factory.mktemp("first")
    run(compose_train([*TINY, *SCHEDULE, "data.batch_size=16", "trainer.max_steps=4"], out))
    checkpoint = out / "checkpoints" / "step0000004.ckpt"
    saved = torch.load(checkpoint, weights_only=True)
    assert (saved["global_batch"], saved["images_seen"], saved["global_step"]) == (16, 64, 4)
    return checkpoint


def test_a_resume_at_half_the_batch_continues_at_the_same_images(first_run, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="elasticface"):
        run(compose_train([*TINY, *SCHEDULE, "data.batch_size=8", f"ckpt_path={first_run}"], tmp_path))
    said = [r.getMessage() for r in caplog.records if r.name == "elasticface.checkpointing.images_seen"]
    assert said == ["resume: global batch 16 -> 8: 64 images seen, step 4 continues as step 8 (the lr x0.5, the "
                    "schedule in images seen)"]
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    # 96 images = 6 steps at 16 = 12 steps at 8; the lr 0.1 x 8/16, decayed once (after 64 images = step 8 at 8)
    assert (last["global_step"], last["images_seen"], last["global_batch"]) == (12, 96, 8)
    assert last["lr_schedulers"][0]["last_epoch"] == 12
    assert last["lr_schedulers"][0]["base_lrs"] == pytest.approx([0.05])
    assert last["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.005)
    rows = list(csv.DictReader((tmp_path / "csv" / "version_0" / "metrics.csv").open()))
    lrs = [float(r["lr-SGD"]) for r in rows if r.get("lr-SGD")]
    assert lrs == pytest.approx([0.005] * 4)  # from the first resumed step on, not 0.05 until the step count catches up


def test_a_resume_with_scaling_off_says_the_schedule_jumps(first_run, tmp_path, caplog):
    overrides = [*TINY, *SCHEDULE, "data.batch_size=8", "trainer.max_steps=5", f"ckpt_path={first_run}",
                 "batch_scaling.reference_batch=null"]
    with caplog.at_level(logging.INFO, logger="elasticface"):
        run(compose_train(overrides, tmp_path))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and r.name == "elasticface.checkpointing.images_seen"]
    assert len(warnings) == 1 and warnings[0].startswith("resume: the schedule jumps. The checkpoint trained at "
                                                         "global batch 16 (64 images at step 4)")
    assert "Set batch_scaling.reference_batch=" in warnings[0]
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert (last["global_step"], last["images_seen"]) == (5, 72)  # steps as written: one more step of 8


@pytest.mark.slow
def test_a_two_process_run_resumed_on_one_keeps_the_images_seen(tmp_path):
    """The world size itself: 2 DDP processes x 8 (global batch 16) for 4 steps, then 1 process x 8."""
    import subprocess
    import sys

    from conftest import ROOT

    base = [sys.executable, "train.py", *TINY, *SCHEDULE, "data.batch_size=8"]
    out = subprocess.run([*base, "trainer=ddp_cpu", "trainer.devices=2", "trainer.max_steps=4",
                          f"hydra.run.dir={tmp_path / 'two'}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    checkpoint = tmp_path / "two" / "checkpoints" / "step0000004.ckpt"
    saved = torch.load(checkpoint, weights_only=True)
    assert (saved["global_batch"], saved["images_seen"]) == (16, 64)
    out = subprocess.run([*base, f"ckpt_path={checkpoint}", f"hydra.run.dir={tmp_path / 'one'}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step 4 continues as step 8" in out.stdout + out.stderr
    last = torch.load(tmp_path / "one" / "checkpoints" / "last.ckpt", weights_only=True)
    assert (last["global_step"], last["images_seen"], last["global_batch"]) == (12, 96, 8)
    assert last["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.005)
