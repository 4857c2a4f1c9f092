"""The fine-tune says the training faces' domain before step 1: low-resolution faces (through 16-32 px and back, as
`elasticface-convert lowres` makes them) are told apart from sharp ones, the line names the keys measured best there
(the recipe's) and this run's value of each it does not keep, and nothing is said for sharp faces."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from elasticface.cli.compose import compose_train
from elasticface.data.faults import DroppedRecord
from elasticface.data.low_resolution import degrade
from elasticface.finetune.domain import LOW_RESOLUTION_KEYS, detail_size, domain_advice

sys.path.insert(0, str(Path(__file__).parent))

Y1_PARAMS = Path(__file__).parent / "data" / "mxnet" / "y1" / "model-0000.params"


def textured_face(seed: int, size: int = 112) -> np.ndarray:
    """A face-sized image with detail at every scale (1/f noise, as photos have), HWC uint8."""
    rng = np.random.default_rng(seed)
    spectrum = rng.normal(size=(size, size, 3)) + 1j * rng.normal(size=(size, size, 3))
    f = np.sqrt(np.fft.fftfreq(size)[:, None] ** 2 + np.fft.fftfreq(size)[None, :] ** 2)
    f[0, 0] = 1
    image = np.real(np.fft.ifft2(spectrum / f[..., None], axes=(0, 1)))
    image = (image - image.mean()) / image.std() * 20 + 128  # a photo's contrast: a standard deviation of 20 levels
    return np.clip(image, 0, 255).astype(np.uint8)


class Faces:
    """A training set's interface: item i is (uint8 [3, H, W], label), or a DroppedRecord."""

    def __init__(self, faces, dropped=()):
        self.faces, self.dropped = faces, set(dropped)

    def __len__(self):
        return len(self.faces)

    def __getitem__(self, i):
        if i in self.dropped:
            return DroppedRecord("faces.rec", str(i), "unreadable")
        return torch.from_numpy(self.faces[i]).permute(2, 0, 1), i % 4


def test_detail_tells_sharp_faces_from_faces_through_16_to_32_px():
    for seed in range(4):
        face = textured_face(seed)
        assert detail_size(face) >= 80
        for px in (16, 24, 32):
            assert detail_size(degrade(face, px)) <= 48, (seed, px)  # low resolution: <= 64


def test_the_line_names_the_keys_and_this_runs_values_only_for_low_resolution():
    low = Faces([degrade(textured_face(s), 16 + s % 17) for s in range(20)], dropped=[3])
    sharp = Faces([textured_face(s) for s in range(20)])
    line = domain_advice(low, dict(LOW_RESOLUTION_KEYS))
    assert line.startswith("the training faces look low-resolution: about ") and " px of detail in 112 " in line
    assert ("the keys measured best there are trainer.max_epochs=8 finetune.wise_alpha=0.95, as this run has them; "
            in line)
    shorter = domain_advice(low, {**LOW_RESOLUTION_KEYS, "trainer.max_epochs": 5})
    assert "are trainer.max_epochs=8 (this run: 5) finetune.wise_alpha=0.95; " in shorter
    assert "as this run has them" not in shorter
    assert domain_advice(sharp, dict(LOW_RESOLUTION_KEYS)) is None


def test_the_recipe_keeps_the_keys_measured_best_at_low_resolution(tmp_path):
    """Since the three-domain rule chose them, `weights=` alone runs the low-resolution keys: the line's "as this run
    has them" holds for a run as typed."""
    from omegaconf import OmegaConf

    cfg = compose_train([f"weights={Y1_PARAMS}", "data=folder", f"data.root={tmp_path}"])
    assert {k: OmegaConf.select(cfg, k) for k in LOW_RESOLUTION_KEYS} == LOW_RESOLUTION_KEYS


@pytest.mark.parametrize("degraded", [True, False])
def test_a_recipe_run_says_it_before_step_1(tmp_path, caplog, degraded):
    """`python train.py weights=<y1> data=folder data.root=<faces> trainer.max_epochs=1` as composed: the line for
    low-resolution faces, with the typed trainer.max_epochs beside the 8 measured best; nothing for sharp ones."""
    from elasticface.training import run

    for person in range(3):
        for k in range(3):
            face = textured_face(10 * person + k)
            path = tmp_path / "faces" / f"person{person}" / f"{k}.png"
            os.makedirs(path.parent, exist_ok=True)
            Image.fromarray(degrade(face, 20) if degraded else face).save(path)
    overrides = [f"weights={Y1_PARAMS}", "data=folder", f"data.root={tmp_path / 'faces'}", "trainer.max_epochs=1",
                 "trainer.limit_train_batches=1", "data.batch_size=4", "logger=[]", "model.compile=false",
                 "data.num_workers=0"]
    with caplog.at_level("INFO"):
        run(compose_train(overrides, tmp_path / "run"))
    said = [r.getMessage() for r in caplog.records if "look low-resolution" in r.getMessage()]
    if degraded:
        assert len(said) == 1 and said[0].startswith("finetune=recipe: the training faces look low-resolution")
        assert "trainer.max_epochs=8 (this run: 1) finetune.wise_alpha=0.95; " in said[0]
    else:
        assert said == []
