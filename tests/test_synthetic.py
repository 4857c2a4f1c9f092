"""Synthetic faces: deterministic, disjoint train/validation identities, controllable variation, not trivial."""

from __future__ import annotations

import hashlib
import multiprocessing
import pickle
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from elasticface.data.pairs import TensorPairSet
from elasticface.data.synthetic import (
    NUISANCE_GROUPS,
    SYNTHETIC_BENCHMARKS,
    SyntheticFaces,
    identity_params,
    render_face,
    render_face_chw,
    synthetic_pairs,
    synthetic_val_sets,
    variation_params,
)


@pytest.fixture(scope="module")
def default_pairs() -> TensorPairSet:
    return synthetic_pairs()


def _within_identity_spread(ds: SyntheticFaces, label: int) -> float:
    """Mean absolute pixel difference of every image of one identity to that identity's mean image."""
    images = torch.stack([ds[i][0] for i in np.flatnonzero(ds.labels == label)]).float()
    return float((images - images.mean(0)).abs().mean())


def _best_threshold_accuracy(scores: np.ndarray, issame: np.ndarray) -> float:
    return max(float(((scores >= t) == issame).mean()) for t in np.unique(scores))


def _pixel_cosine(pairs: TensorPairSet) -> np.ndarray:
    x = pairs.images.float().div(127.5).sub(1.0).flatten(1)
    x = torch.nn.functional.normalize(x, dim=1)
    return (x[0::2] * x[1::2]).sum(1).numpy()


# -- parameters and rendering ----------------------------------------------------------------------


def test_identity_params_are_deterministic_and_seeded():
    a, b = identity_params(7, seed=3), identity_params(7, seed=3)
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    assert identity_params(7, seed=4)["face_w"] != a["face_w"]
    assert identity_params(8, seed=3)["face_w"] != a["face_w"]
    assert -1.0 <= a["variation_level"] <= 1.0


def test_render_face_same_seed_same_bytes_other_seed_other_bytes():
    image = render_face(identity_params(5, 0), variation_params(5, 2, 0, 1.0))
    assert image.dtype == np.uint8 and image.shape == (112, 112, 3)
    assert image.tobytes() == render_face(identity_params(5, 0), variation_params(5, 2, 0, 1.0)).tobytes()
    assert np.array_equal(render_face_chw(identity_params(5, 0), variation_params(5, 2, 0, 1.0)), image.transpose(2, 0, 1))
    assert not np.array_equal(image, render_face(identity_params(5, 1), variation_params(5, 2, 1, 1.0)))
    assert not np.array_equal(image, render_face(identity_params(5, 0), variation_params(5, 3, 0, 1.0)))
    assert image.std() > 10  # actually drawn, not a flat colour


def test_zero_variation_parameters_are_neutral():
    v0, v1 = variation_params(3, 0, 0, 0.0), variation_params(3, 9, 0, 0.0)
    for key in ("tx", "ty", "rot", "yaw", "smile", "mouth_open", "blur", "noise"):
        assert v0[key] == 0.0 == v1[key], key
    assert v0["scale"] == v0["gain"] == v0["contrast"] == v0["eye_open"] == 1.0


def test_render_speed_is_reported():
    ident = [identity_params(i, 0) for i in range(10)]
    var = [variation_params(i, j, 0, 1.0) for i in range(10) for j in range(5)]
    start = time.perf_counter()
    for k, v in enumerate(var):
        render_face_chw(ident[k // 5], v)
    per_image = (time.perf_counter() - start) / len(var)
    print(f"synthetic faces: {per_image * 1e3:.2f} ms per image, {1 / per_image:.0f} images/s (one thread)")
    assert per_image < 0.05  # generous: a busy 2-core CI box; ~2 ms when idle


# -- training dataset -----------------------------------------------------------------------------


def test_dataset_items_shapes_and_labels():
    ds = SyntheticFaces(num_identities=4, images_per_identity=3, seed=0)
    assert len(ds) == 12 and ds.num_classes == 4
    assert ds.labels.dtype == np.int64 and ds.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    image, label = ds[4]
    assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8 and image.shape == (3, 112, 112)
    assert isinstance(label, int) and label == 1
    assert torch.equal(ds[-1][0], ds[11][0])
    with pytest.raises(IndexError):
        ds[12]
    with pytest.raises(ValueError):
        SyntheticFaces(num_identities=0)


def test_dataset_is_deterministic_cache_or_not_and_independent_of_size():
    small = SyntheticFaces(num_identities=3, images_per_identity=2, seed=5)
    large = SyntheticFaces(num_identities=6, images_per_identity=2, seed=5, cache=False)
    for i in range(len(small)):
        assert torch.equal(small[i][0], large[i][0])  # identity k is identity k whatever the size
        assert torch.equal(small[i][0], small[i][0])  # cached read equals the first render
    other_seed = SyntheticFaces(num_identities=3, images_per_identity=2, seed=6)
    assert not torch.equal(small[0][0], other_seed[0][0])
    offset = SyntheticFaces(num_identities=3, images_per_identity=2, seed=5, identity_offset=3)
    assert torch.equal(offset[0][0], large[6][0]) and offset[0][1] == 0


def test_zero_intra_class_variation_gives_identical_images():
    ds = SyntheticFaces(num_identities=2, images_per_identity=4, intra_class_variation=0.0, cache=False)
    first = ds[0][0]
    assert all(torch.equal(first, ds[i][0]) for i in range(1, 4))
    assert not torch.equal(first, ds[4][0])  # a different identity still looks different


def test_variation_grows_with_intra_class_variation():
    spreads = [
        _within_identity_spread(SyntheticFaces(3, 6, intra_class_variation=scale, variation_spread=0.0, cache=False), 0)
        for scale in (0.0, 0.3, 1.0)
    ]
    assert spreads[0] == 0.0
    assert spreads[0] < spreads[1] < spreads[2]


def test_variation_spread_makes_some_identities_vary_more():
    levels = [identity_params(i, 0)["variation_level"] for i in range(20)]
    calm, wild = int(np.argmin(levels)), int(np.argmax(levels))
    ds = SyntheticFaces(20, 6, variation_spread=1.0, cache=False)
    assert _within_identity_spread(ds, calm) < _within_identity_spread(ds, wild)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_forked_dataloader_workers_fill_one_shared_cache():
    ds = SyntheticFaces(num_identities=2, images_per_identity=4)
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="fork")
    images = torch.cat([batch for batch, _ in loader])
    assert images.shape == (8, 3, 112, 112)
    assert bool(ds._done.all())  # the workers' renders landed in the parent's cache
    assert torch.equal(ds._cache, images)
    assert torch.equal(images[5], SyntheticFaces(2, 4, cache=False)[5][0])


def test_pickled_copy_renders_on_the_fly():
    ds = SyntheticFaces(num_identities=2, images_per_identity=2)
    copy = pickle.loads(pickle.dumps(ds))
    assert torch.equal(copy[3][0], ds[3][0]) and copy[3][1] == 1


# -- validation pairs -----------------------------------------------------------------------------


def test_default_pairs_are_balanced_and_disjoint_from_training(default_pairs):
    pairs = default_pairs
    assert isinstance(pairs, TensorPairSet) and pairs.name == "synthetic"
    assert pairs.num_pairs == 600 and len(pairs) == 1200
    assert pairs.images.dtype == torch.uint8 and pairs.images.shape == (1200, 3, 112, 112)
    assert int(pairs.issame.sum()) == 300
    assert all(int(fold.sum()) == 30 for fold in np.split(pairs.issame, 10))  # every 10-fold split is balanced
    ids = pairs.identity_ids
    assert np.array_equal(ids[:, 0] == ids[:, 1], pairs.issame)
    assert ids.min() >= 100000 and ids.max() < 100050
    train = SyntheticFaces(cache=False)
    assert not set(train.identity_ids.tolist()) & set(ids.ravel().tolist())
    image, index = pairs[3]
    assert image.shape == (3, 112, 112) and index == 3


def test_pairs_are_deterministic():
    a = synthetic_pairs("a", num_identities=5, num_pairs=20, seed=3)
    b = synthetic_pairs("b", num_identities=5, num_pairs=20, seed=3)
    c = synthetic_pairs("c", num_identities=5, num_pairs=20, seed=4)
    assert torch.equal(a.images, b.images) and np.array_equal(a.issame, b.issame)
    assert not torch.equal(a.images, c.images)
    with pytest.raises(ValueError):
        synthetic_pairs(num_pairs=7)
    sets = synthetic_val_sets(num_identities=5, num_pairs=20, seed=3)
    assert list(sets) == ["synthetic"] and torch.equal(sets["synthetic"].images, a.images)


def test_raw_pixel_cosine_is_a_weak_verifier(default_pairs):
    """Nuisance dominates pixel space: raw-pixel cosine, even with the best threshold chosen on the test
    pairs themselves, is far from solving the task (so a trained model has room to beat it)."""
    scores = _pixel_cosine(default_pairs)
    accuracy = _best_threshold_accuracy(scores, default_pairs.issame)
    print(f"raw-pixel cosine, best threshold on the default pairs: {accuracy:.3f}")
    assert accuracy < 0.75
    # the signal is there though: same-identity pairs are more similar on average
    assert scores[default_pairs.issame].mean() > scores[~default_pairs.issame].mean()


# -- the split into params / render / dataset / benchmarks kept every byte -----------------------------


def test_default_images_are_bit_identical_to_the_unsplit_module():
    """Checksums computed with the single-file synthetic.py (commit d92da84) before it was split up."""
    h = hashlib.sha256()
    ds = SyntheticFaces(num_identities=200, images_per_identity=30, seed=42, cache=False)  # configs/data/synthetic.yaml
    for i in list(range(0, 6000, 97)) + [5999]:
        h.update(ds[i][0].numpy().tobytes())
    assert h.hexdigest() == "764d8ef560364bf7cbd9a83f1271f465d92604dd594f04327c584d0dba34badb"
    p = synthetic_pairs("synthetic", 100, 40, 1)
    digest = hashlib.sha256(p.images.numpy().tobytes() + np.asarray(p.issame).tobytes()).hexdigest()
    assert digest == "68c90fa2b6a67508cf6b69aa6172db4c3dba91b43e5df5090416e3973c71394c"
    h = hashlib.sha256()
    for scale in (0.0, 0.5, 2.0):
        for k in range(5):
            h.update(render_face(identity_params(k, 3), variation_params(k, k + 1, 3, scale)).tobytes())
    assert h.hexdigest() == "ef89b8780f860a7d10f1c439967ac15fa438c35b377a53c54140e96f09ab8a64"


# -- named benchmarks ------------------------------------------------------------------------------


def test_nuisance_factors_scale_only_their_group():
    base = variation_params(4, 2, 0, 1.0)
    posed = variation_params(4, 2, 0, 1.0, {"pose": 2.0})
    assert posed["yaw"] == 2 * base["yaw"] and posed["tx"] == 2 * base["tx"]
    for key in ("smile", "gain", "bg_dir", "blur", "noise_seed"):
        assert np.array_equal(posed[key], base[key]), key  # same draws, other groups untouched
    calm = variation_params(4, 2, 0, 1.0, {g: 0.0 for g in NUISANCE_GROUPS})
    assert calm["yaw"] == calm["smile"] == calm["blur"] == 0.0 and calm["gain"] == 1.0
    with pytest.raises(ValueError, match="unknown nuisance group.*'posture'"):
        variation_params(4, 2, 0, 1.0, {"posture": 2.0})


def test_benchmarks_are_named_disjoint_and_stress_their_nuisance():
    names = ["pose", "lighting", "expression", "hard"]
    sets = synthetic_val_sets(names, num_identities=6, num_pairs=10, seed=1)
    assert list(sets) == names and all(s.name == n for n, s in sets.items())
    ids = {n: set(s.identity_ids.ravel().tolist()) for n, s in sets.items()}
    train = set(SyntheticFaces(cache=False).identity_ids.tolist())
    for a in names:
        assert not ids[a] & train
        assert all(not ids[a] & ids[b] for b in names if b != a)
    assert SYNTHETIC_BENCHMARKS["pose"].factors["pose"] > SYNTHETIC_BENCHMARKS["pose"].factors["lighting"]
    assert SYNTHETIC_BENCHMARKS["hard"].variation > 1.0
    # the default set is today's single set, byte for byte
    assert torch.equal(synthetic_val_sets(num_identities=6, num_pairs=10)["synthetic"].images,
                       synthetic_pairs("synthetic", 6, 10, 1).images)
    with pytest.raises(ValueError, match=r"data.val_sets.names=\['lfw'\].*expected some of \['synthetic', 'pose'"):
        synthetic_val_sets(["lfw"])
