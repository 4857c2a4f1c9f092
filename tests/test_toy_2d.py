"""The paper's toy example: per-identity variation, resized batches, the 2-D geometry and experiment=toy_2d."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from elasticface.data.datamodule import FaceDataModule
from elasticface.data.synthetic import SyntheticFaces, identity_params, render_face_chw, variation_params
from elasticface.eval.toy_2d import read_toy_results, toy_geometry
from elasticface.training import run


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def test_geometry_of_a_known_layout():
    # centres of classes 0..3 at 10°, 100°, 190°, 300° (gaps 90, 90, 110, 70); class 0 straddles 0°
    centre_deg = [10.0, 100.0, 190.0, 300.0]
    centres = np.array([unit(a) * np.array([2.0, 2.0]) for a in centre_deg])  # norms do not matter
    offsets = {0: [-15.0, 15.0], 1: [-4.0, 4.0], 2: [0.0, 0.0], 3: [1.0, 3.0]}
    embeddings, labels = [], []
    for k, offs in offsets.items():
        for o in offs:
            embeddings.append(unit(centre_deg[k] + o))
            labels.append(k)
    result = toy_geometry(np.array(embeddings) * 3.0, np.array(labels), centres, identity_variation=[0.2, 1, 0.2, 1])
    assert result["ideal_gap_deg"] == 90.0
    assert result["classes_around_circle"] == [0, 1, 2, 3]
    np.testing.assert_allclose(result["consecutive_gaps_deg"], [90.0, 90.0, 110.0, 70.0], atol=1e-9)
    assert result["gap_mean_abs_error_deg"] == pytest.approx(10.0)
    np.testing.assert_allclose(result["class_std_deg"], [15.0, 4.0, 0.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(result["class_offset_deg"], [0.0, 0.0, 0.0, 2.0], atol=1e-9)
    assert result["mean_class_std_deg"] == pytest.approx(5.0)
    assert result["mean_class_std_deg_by_variation"] == pytest.approx({"0.2": 7.5, "1": 2.5})


def test_identity_variation_sets_each_identity_s_nuisance():
    faces = SyntheticFaces(num_identities=2, images_per_identity=3, seed=5, identity_variation=[0.0, 0.8], cache=False)
    still = [faces[i][0] for i in range(3)]
    assert all(torch.equal(still[0], image) for image in still), "identity 0 has no nuisance at all"
    for index in range(3):
        expected = render_face_chw(identity_params(1, 5), variation_params(1, index, 5, scale=0.8))
        assert torch.equal(faces[3 + index][0], torch.from_numpy(expected))
    with pytest.raises(ValueError, match="one per identity"):
        SyntheticFaces(num_identities=3, images_per_identity=2, identity_variation=[1.0, 1.0])


def test_image_size_resizes_train_and_validation_batches():
    datamodule = FaceDataModule(train_dataset=lambda: None, image_size=32)
    images = torch.randint(0, 256, (4, 3, 112, 112), dtype=torch.uint8)
    out, labels = datamodule.on_after_batch_transfer((images, torch.arange(4)), 0)
    assert out.shape == (4, 3, 32, 32) and out.dtype == torch.float32
    # a flat image stays flat, at its [-1, 1] value
    flat = torch.full((1, 3, 112, 112), 255, dtype=torch.uint8)
    assert torch.allclose(datamodule.on_after_batch_transfer((flat, torch.zeros(1)), 0)[0], torch.ones(1, 3, 32, 32))
    with pytest.raises(ValueError, match="data.image_size"):
        FaceDataModule(train_dataset=lambda: None, image_size=4)


def test_toy_2d_run_writes_its_geometry(tiny_cfg, tmp_path):
    cfg = tiny_cfg("experiment=toy_2d", "head=elastic_arc_plus", "model.embedding_size=2", "trainer.max_epochs=1")
    assert cfg.data.batch_size == 16 and cfg.scheduler.milestone_fractions == [0.15, 0.25, 0.3, 0.75]
    summary = run(cfg)
    assert summary["backbone"] == "resnet18"
    saved = json.loads((tmp_path / "toy_2d.json").read_text())
    result = read_toy_results(tmp_path)
    assert result["embeddings"].shape == (8 * 6, 2) and result["centres"].shape == (8, 2)
    assert sorted(set(result["labels"].tolist())) == list(range(8))
    assert sum(saved["consecutive_gaps_deg"]) == pytest.approx(360.0)
    assert saved["identity_variation"] == [0.25] * 4 + [1.0] * 4
    recomputed = toy_geometry(result["embeddings"], result["labels"], result["centres"], saved["identity_variation"])
    assert recomputed["class_std_deg"] == pytest.approx(saved["class_std_deg"])
    assert (tmp_path / "toy_2d.png").stat().st_size > 0
    # the model's own embeddings, as the callback computed them
    centres = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]["classifier.centers.weight"]
    np.testing.assert_allclose(result["centres"], centres.numpy(), rtol=1e-6)


def test_toy_2d_without_a_2d_embedding_warns_and_writes_nothing(tiny_cfg, tmp_path):
    with pytest.warns(UserWarning, match="model.embedding_size=2"):
        run(tiny_cfg("experiment=toy_2d", "trainer.max_steps=1", "trainer.max_epochs=1"))
    assert not (tmp_path / "toy_2d.json").exists()
