"""Runs that survive (fast part): checkpoints that hold what summary.json says, divergence that fails
the run, data faults counted once, and the small file-format gaps. The kill -9 / SLURM tests are in
test_survival_slow.py."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys

import pytest
import pytorch_lightning as pl
import torch

from conftest import ROOT, TINY, compose_train
from elasticface.callbacks.divergence import TrainingDiverged
from elasticface.data.datamodule import FaceDataModule
from elasticface.data.faults import DroppedRecord, FaultLedger, TooManyCorruptRecords
from elasticface.data.pair_files import load_bin
from elasticface.data.recordio_dataset import RecordIODataset
from elasticface.training import build_module, build_trainer, run
from elasticface.checkpointing.atomic_save import AtomicCheckpointIO, remove_stale_temporaries
from helpers.face_datasets import ListFaces
from helpers.nonfinite import nan_loss_at_step
from helpers.images import smooth_jpeg
from helpers.recordio_files import ifqq, whole, write_files


@pytest.fixture
def final_state(monkeypatch):
    """The module's weights right after trainer.fit, as the run left them in memory."""
    captured: dict[str, dict[str, torch.Tensor]] = {}
    fit = pl.Trainer.fit

    def capturing_fit(self, model, *args, **kwargs):
        fit(self, model, *args, **kwargs)
        captured["state"] = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in model.state_dict().items()}

    monkeypatch.setattr(pl.Trainer, "fit", capturing_fit)
    return captured


# ------------------------------------------------------------------------------------------ checkpoints


def test_last_ckpt_is_the_final_state_and_summary_names_what_each_file_holds(tiny_cfg, tmp_path, final_state):
    stale = tmp_path / "checkpoints" / ".last.ckpt.k1ll3d.tmp"  # what a write killed by kill -9 leaves
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\0" * 1000)
    summary = run(tiny_cfg("trainer.max_epochs=3"))  # 9 steps: the end is not a multiple of every_n_steps=2
    assert not stale.exists(), "the next run removes an unfinished checkpoint write"
    assert summary["global_step"] == 9
    saved = json.loads((tmp_path / "summary.json").read_text())
    last = torch.load(saved["last_checkpoint"], map_location="cpu", weights_only=False)
    assert saved["last_checkpoint"].endswith("last.ckpt") and last["global_step"] == saved["global_step"] == 9
    for key, value in final_state["state"].items():
        stored = last["state_dict"][key]
        assert torch.equal(stored, value) if torch.is_tensor(value) else stored == value, key
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert [n for n in names if n.startswith("step")] == ["step0000006.ckpt", "step0000008.ckpt", "step0000009.ckpt"]
    best = torch.load(saved["best_checkpoint"], map_location="cpu", weights_only=False)
    best_score = next(s["best_model_score"] for k, s in best["callbacks"].items() if "val/acc_mean" in k)
    assert float(best_score) == saved["best_checkpoint_acc"] == saved["val/acc_mean"]["best"]
    assert saved["weights_finite"] is True


def test_atomic_write_keeps_lightnings_fsspec_save_for_remote_paths(tmp_path, monkeypatch):
    import io

    import fsspec

    monkeypatch.chdir(tmp_path)  # a remote URL taken for a local path would land in ./memory:/...
    run = f"memory://bucket/{tmp_path.name}/run"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, f"{run}/last.ckpt")
    remote = fsspec.filesystem("memory")
    try:
        assert remote.ls(run, detail=False) == [f"/bucket/{tmp_path.name}/run/last.ckpt"]
        assert torch.load(io.BytesIO(remote.cat(f"{run}/last.ckpt")), weights_only=True) == {"step": 1}
        assert remove_stale_temporaries(run) == [] and list(tmp_path.iterdir()) == []
    finally:
        remote.rm(f"memory://bucket/{tmp_path.name}", recursive=True)


# ------------------------------------------------------------------------------------------ divergence


def test_nan_images_stop_the_run_naming_the_step_and_keep_finite_checkpoints(tiny_cfg, tmp_path, monkeypatch):
    import elasticface.data.datamodule as datamodule

    normalize = datamodule.normalize

    def nan_at_step_5(images):
        out = normalize(images)
        return out.fill_(float("nan")) if datamodule_instance[0].trainer.global_step == 5 else out

    datamodule_instance: list[FaceDataModule] = []
    setup = FaceDataModule.setup

    def remember(self, stage=None):
        datamodule_instance[:] = [self]
        return setup(self, stage)

    monkeypatch.setattr(FaceDataModule, "setup", remember)
    monkeypatch.setattr(datamodule, "normalize", nan_at_step_5)
    with pytest.raises(TrainingDiverged, match=r"diverged at step 5 .*loss = nan.*non-finite gradient"):
        run(tiny_cfg("trainer.max_epochs=3"))
    assert not (tmp_path / "summary.json").exists()
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4
    floats = [v for v in last["state_dict"].values() if torch.is_tensor(v) and v.is_floating_point()]
    assert all(torch.isfinite(v).all() for v in floats)


def test_skip_budget_skips_and_counts_a_nonfinite_loss(tiny_cfg, tmp_path, monkeypatch):
    nan_loss_at_step(monkeypatch, 3)
    with pytest.raises(TrainingDiverged, match=r"step 3 .*loss = nan.*train.skip_nonfinite_steps=N"):
        run(tiny_cfg("trainer.max_epochs=2"))
    summary = run(compose_train([*TINY, "trainer.max_epochs=2", "train.skip_nonfinite_steps=1"], tmp_path / "b"))
    assert summary["weights_finite"] and math.isfinite(summary["val/acc_mean"]["final"])
    assert summary["global_step"] == 6  # the skipped step still counts as a step: nothing moved
    metrics = (tmp_path / "b" / "csv").glob("version_*/metrics.csv")
    assert any("train/skipped_nonfinite_steps" in m.read_text().splitlines()[0] for m in metrics)


@pytest.mark.parametrize("scale", ["head", pytest.param("class_count", marks=pytest.mark.slow)])
def test_exploding_learning_rate_exits_non_zero(scale, tmp_path):
    """At s = 64 the loss turns non-finite; at the class-count scale (2.75 for 8 classes) the loss and gradients
    stay finite while BatchNorm's statistics overflow: both stop before validation reads them."""
    out = subprocess.run([sys.executable, "train.py", *TINY, "optimizer.lr=1e6", "model.clip_grad_norm=null",
                          "trainer.max_epochs=4", f"scale={scale}", f"hydra.run.dir={tmp_path}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    assert "training diverged at step" in out.stderr + out.stdout
    assert not (tmp_path / "summary.json").exists()


# ------------------------------------------------------------------------------------------ data faults


def faulty_recordio(root, n: int = 48, bad: tuple[int, ...] = (7,), labels_mod: int = 8) -> None:
    jp = smooth_jpeg(0)
    write_files(root, [(k, whole(ifqq(0, float(k % labels_mod), k) + (b"junk" if k in bad else jp))) for k in range(n)],
                f"{labels_mod},112,112\n")


def test_one_bad_record_counts_once_over_epochs_and_workers(tmp_path):
    faulty_recordio(tmp_path)
    dm = FaceDataModule(train_dataset=lambda: RecordIODataset(str(tmp_path), max_corrupt=1), batch_size=16,
                        num_workers=2, persistent_workers=False)
    dm.setup("fit")
    loader = dm.train_dataloader()
    for epoch in range(4):  # the old per-read count stopped here: 4 reads of the one bad record > max_corrupt=1
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            dm.faults.add(batch[3])
    assert dm.faults.num_corrupt == 1 and dm.faults.max_corrupt == 1
    restored = FaultLedger(1)
    restored.load_state_dict(dm.state_dict()["faults"])  # a resumed run keeps counting where it stopped
    assert restored.records == dm.faults.records


def test_past_the_limit_the_error_names_the_file_and_first_bad_keys(tmp_path):
    faulty_recordio(tmp_path, bad=(3, 5, 9))
    ds = RecordIODataset(str(tmp_path), max_corrupt=2)
    ledger = FaultLedger(ds.max_corrupt)
    with pytest.raises(TooManyCorruptRecords,
                       match=rf"3 distinct corrupt records.*{tmp_path}/train\.rec: keys 3, 5, 9"):
        ledger.add([item for item in (ds[i] for i in range(12)) if isinstance(item, DroppedRecord)])


def test_batches_left_with_one_image_are_skipped_and_counted(tiny_cfg, tmp_path):
    cfg = tiny_cfg("trainer.max_epochs=3", "callbacks=none", "logger=csv", "scale=head")  # 2 classes
    # 8 faces, 6 of them unreadable: shuffled batches of 4 keep 0, 1 or 2 images
    mostly_unreadable = ListFaces(8, num_classes=2, unreadable={1, 2, 3, 4, 6, 7}, max_corrupt=100)
    dm = FaceDataModule(train_dataset=lambda: mostly_unreadable, batch_size=4, num_workers=0, seed=cfg.seed)
    dm.setup("fit")
    model = build_module(cfg, dm.num_classes)
    trainer, _ = build_trainer(cfg)
    trainer.fit(model, datamodule=dm)  # BatchNorm would raise on a batch of one
    assert dm.faults.small_batches >= 3 and dm.faults.num_corrupt == 6


# ------------------------------------------------------------------------------------------ file gaps


def test_bin_that_is_not_a_pickle_names_the_file(tmp_path):
    path = tmp_path / "lfw.bin"
    path.write_bytes(b"this is a text file, not a pickle")
    with pytest.raises(pickle.UnpicklingError, match=rf"{path}: not a readable insightface \.bin"):
        load_bin(str(path))


def test_binary_property_file_names_the_file(tmp_path):
    faulty_recordio(tmp_path, bad=())
    (tmp_path / "property").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(ValueError, match=rf"{tmp_path}/property: expected a text line 'num_classes,height,width'"):
        RecordIODataset(str(tmp_path))


def test_im2rec_without_property_does_not_take_the_class_count_from_a_stray_label(tmp_path):
    jp = smooth_jpeg(0)
    records = [(k, whole(ifqq(0, float(k % 4), k) + jp)) for k in range(8)] + [(8, whole(ifqq(0, 99999.0, 8) + jp))]
    write_files(tmp_path, records)
    with pytest.raises(ValueError,
                       match=r"train\.rec: no .*property.*not 0\.\.C-1.*largest: 99999, 3, 2.*data\.num_classes"):
        RecordIODataset(str(tmp_path))
    ds = RecordIODataset(str(tmp_path), num_classes=4)  # told the count: the stray record is dropped and counted
    assert ds.num_classes == 4 and len(ds) == 8 and ds.corrupt_keys == [8]
    write_files(tmp_path / "dense", records[:8])  # labels 0..3 all present: inferred, as before
    assert RecordIODataset(str(tmp_path / "dense")).num_classes == 4
