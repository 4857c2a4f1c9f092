"""A pair set's faces embedded once each: insightface's `.bin` sets store both images of every pair, so a face in
several pairs is stored several times (lfw.bin: 12,000 stored, 7,701 distinct). eval.py, validation and the
baselines embed the distinct images and score every pair from them, with the results of embedding all."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from torch import nn

from elasticface.data.datamodule import FaceDataModule
from elasticface.data.pair_files import load_bin, write_bin
from elasticface.eval.embedding_loop import embed_dataset, evaluate_pair_set
from elasticface.metrics.verification import VerificationAccuracy
from elasticface.data.decode import encode_jpeg
from helpers.face_datasets import ListFaces


@pytest.fixture(scope="module")
def repeated_bin(tmp_path_factory):
    """12 pairs over 9 distinct faces (JPEG bytes, as a `.bin` stores them), the faces drawn with repeats."""
    rng = np.random.default_rng(0)
    faces = [encode_jpeg(rng.integers(0, 256, (112, 112, 3), dtype=np.uint8)) for _ in range(9)]
    picks = rng.integers(0, 9, 24)
    picks[:9] = np.arange(9)  # every face at least once
    path = tmp_path_factory.mktemp("bin") / "rep.bin"
    write_bin(str(path), [faces[i] for i in picks], [bool(i % 2) for i in range(12)])
    return path, [faces[i] for i in picks]


class Counting(nn.Module):
    """A fixed random projection that counts the images it embeds."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(3 * 112 * 112, 16)
        self.images = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.images += x.shape[0]
        return self.proj(x.flatten(1))


def test_a_bins_repeated_faces_are_found_by_their_bytes(repeated_bin):
    path, stored = repeated_bin
    pairs = load_bin(str(path), "rep")
    first: dict[str, int] = {}
    expected = [first.setdefault(hashlib.sha256(b).hexdigest(), i) for i, b in enumerate(stored)]
    assert pairs.image_of.tolist() == expected
    assert pairs.distinct_images().indices == sorted(set(expected)) and len(set(expected)) == 9


def test_scoring_from_the_distinct_faces_equals_embedding_every_stored_one(repeated_bin):
    pairs = load_bin(str(repeated_bin[0]), "rep")
    model = Counting()
    result, roc = evaluate_pair_set(model, pairs, batch_size=4, flip=True, device="cpu")
    assert model.images == 2 * 9, "each distinct face and its flip once"
    emb, idx = embed_dataset(model, pairs, batch_size=4, flip=True, device="cpu")  # every stored image
    every = VerificationAccuracy(pairs.issame, sync_on_compute=False)
    every.update(emb, idx)
    reference = {k: float(v) for k, v in every.compute().items()}
    assert result.keys() == reference.keys()
    for key in result:
        assert result[key] == pytest.approx(reference[key], rel=1e-6, abs=1e-9), key
    # the same faces in other batches: the projection's sums in another order, the last float32 bits apart
    assert np.abs(roc["genuine"] - every.roc_data()["genuine"]).max() < 1e-5


def test_validation_loads_each_distinct_face_once(repeated_bin):
    pairs = load_bin(str(repeated_bin[0]), "rep")
    dm = FaceDataModule(train_dataset=lambda: ListFaces(8), val_sets=lambda: {"rep": pairs}, batch_size=2,
                        val_batch_size=4, num_workers=0)
    dm.setup("fit")
    seen = [int(i) for _, idx in dm.val_dataloader()[0] for i in idx]
    assert seen == pairs.distinct_images().indices


def test_partial_validation_scores_the_pairs_whose_faces_were_embedded(repeated_bin):
    """A stored image counts as embedded when its first copy was: limit_val_batches still scores complete pairs."""
    pairs = load_bin(str(repeated_bin[0]), "rep")
    metric = VerificationAccuracy(pairs.issame, num_folds=2, allow_partial=True, image_of=pairs.image_of,
                                  sync_on_compute=False)
    emb, idx = embed_dataset(Counting(), pairs.distinct_images(), batch_size=4, flip=False, device="cpu")
    keep = idx < 6  # faces 6, 7 and 8 never embedded: the pairs that hold one of them are left out
    metric.update(emb[keep], idx[keep])
    have = set(idx[keep].tolist())
    complete = [p for p in range(12) if {int(pairs.image_of[2 * p]), int(pairs.image_of[2 * p + 1])} <= have]
    assert 2 <= len(complete) < 12
    with pytest.warns(UserWarning, match=f"partial validation scores {len(complete)} of 12 pairs"):
        metric.compute()
