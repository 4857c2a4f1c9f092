"""Synthetic faces: deterministic, disjoint train/validation identities, controllable variation, not trivial."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import subprocess
import sys
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
from elasticface.utils.simd import CpuKernels, child_env


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
    chw = render_face_chw(identity_params(5, 0), variation_params(5, 2, 0, 1.0))
    assert np.array_equal(chw, image.transpose(2, 0, 1))
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
def test_forked_dataloader_workers_fill_one_shared_cache(monkeypatch):
    import elasticface.data.synthetic.dataset as dataset_module

    ds = SyntheticFaces(num_identities=2, images_per_identity=4)
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="fork")
    images = torch.cat([batch for batch, _ in loader])
    assert images.shape == (8, 3, 112, 112)
    assert torch.equal(images[5], SyntheticFaces(2, 4, cache=False)[5][0])

    def render_again(*args):
        raise AssertionError("the parent rendered an image the workers had rendered: their cache is not shared")

    monkeypatch.setattr(dataset_module, "render_face_chw", render_again)
    assert torch.equal(torch.stack([ds[i][0] for i in range(len(ds))]), images)  # read from the workers' renders


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


# -- the same bytes on every machine ---------------------------------------------------------------

# The checksums below were computed once (renderer of issue 17: portable_math instead of numpy's SIMD
# transcendentals, libm and Pillow's blur) and must hold on every machine. The script renders the
# default training set's faces (configs/data/synthetic.yaml: 200 x 30, seed 42; every 97th image),
# the five benchmarks at 40 pairs each (identities and nuisances as at 1,000 pairs, fewer of them) and
# 5 faces at nuisance scales 0, 0.5 and 2; it also hashes numpy and torch transcendental kernels on a
# fixed input ("probe"), which shows whether a kernel choice really changed the kernels.
_CHECKSUM_SCRIPT = r"""
import hashlib, json
import numpy as np, torch
from elasticface.data.synthetic import (
    SYNTHETIC_BENCHMARKS, SyntheticFaces, identity_params, render_face, synthetic_val_sets, variation_params,
)
out = {}
h = hashlib.sha256()
ds = SyntheticFaces(num_identities=200, images_per_identity=30, seed=42, cache=False)
for i in list(range(0, 6000, 97)) + [5999]:
    h.update(ds[i][0].numpy().tobytes())
out["train"] = h.hexdigest()
for name, p in synthetic_val_sets(list(SYNTHETIC_BENCHMARKS), num_identities=100, num_pairs=40, seed=1).items():
    out[name] = hashlib.sha256(p.images.numpy().tobytes() + np.asarray(p.issame).tobytes()).hexdigest()
h = hashlib.sha256()
for scale in (0.0, 0.5, 2.0):
    for k in range(5):
        h.update(render_face(identity_params(k, 3), variation_params(k, k + 1, 3, scale)).tobytes())
out["scales"] = h.hexdigest()
x = np.random.default_rng(0).uniform(-10.0, 10.0, 4099)
probe = [np.exp(x), np.sin(x), np.power(np.abs(x), 1.7), np.exp(x.astype(np.float32)), np.sin(x.astype(np.float32))]
t = torch.from_numpy(x.astype(np.float32))
out["probe_numpy"] = hashlib.sha256(b"".join(a.tobytes() for a in probe)).hexdigest()
# softmax differs between torch's default, avx2 and avx512 kernels (vector width); exp or sin alone do not here
out["probe_torch"] = hashlib.sha256(
    torch.cat([t.softmax(0), t.sigmoid(), t.abs().pow(1.7)]).numpy().tobytes()
).hexdigest()
from elasticface.utils.simd import CpuKernels
cpu = CpuKernels.of_this_process()
out["torch_level"], out["numpy_level"] = cpu.torch_level(), cpu.numpy_level()
print(json.dumps(out))
"""

EXPECTED_CHECKSUMS = {
    "train": "204fbe563c7092911d6e87386b35ae34e995d8db1a7befdd36698b0567975c3d",
    "synthetic": "d20ff3b69596562161d0689a176dbf3f333cbeb2a41666a26d04d84743a3be84",
    "pose": "da41c0132cf5a4a4c288b6675a2a9ab7dd8b6bfb7d503dbcb0a8bee046894e88",
    "lighting": "afa8ffda7ac5ded045e8cd44439a6e39eaa1614f0749c5e5f793cf667baee2e5",
    "expression": "09d88737bfd08a8181fbfd7303216e0883246a0d5f2b9adfe80ee01fe68aa662",
    "hard": "50d829ebcb11649e287456420909bc8e805df1f9c194c1d71e568f8f2c7676a4",
    "scales": "3e80fed4e2a7038ab475a2f3e676aec32e8ba5c9e0ef07ab1bab5c08768b2cea",
}

def _kernel_choices(cpu: CpuKernels) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Environments that make numpy and torch pick other SIMD kernels, each level at least once, within what
    the CPU offers (as this process sees it: a parent restricted to AVX2 is an AVX2-only CPU); a choice
    above it is left out and named. Returns the choices and what was left out."""
    choices: dict[str, dict[str, str]] = {"machine's own": {}}
    left_out = []
    for name, levels in {"numpy AVX2, torch avx2": ("avx2", "avx2"),
                         "numpy AVX-512, torch avx512": ("avx512", "avx512"),
                         "numpy baseline, torch default": ("baseline", "baseline")}.items():
        try:
            env = cpu.env(numpy=levels[0], torch=levels[1])
        except ValueError as e:
            left_out.append(f"{name}: {e}")
            continue
        if levels != (cpu.numpy_level(), cpu.torch_level()):  # the machine's own already runs these levels
            choices[name] = env
    return choices, left_out


def _checksums_under(env: dict[str, str]) -> subprocess.Popen:
    full = child_env(env)
    full.update(OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-c", _CHECKSUM_SCRIPT], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_faces_have_one_checksum_whatever_simd_kernels_numpy_and_torch_pick():
    """The renderer in fresh processes under every numpy and torch kernel level the CPU offers: one set of
    checksums, the stored one. Each child reports the levels it ran and a probe of numpy's and torch's
    transcendental kernels: the levels must be the ones asked for, and levels that differ must give other
    probe bits (numpy's and torch's AVX-512, AVX2 and baseline kernels differ in their last bits), so the
    equality is not vacuous."""
    choices, left_out = _kernel_choices(CpuKernels.of_this_process())
    for line in left_out:
        print("left out:", line)
    procs = {name: _checksums_under(env) for name, env in choices.items()}
    results = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} ({choices[name]}): exit {proc.returncode}: {stderr[-3000:]}"
        results[name] = json.loads(stdout)
    for name, got in results.items():
        assert {k: got[k] for k in EXPECTED_CHECKSUMS} == EXPECTED_CHECKSUMS, f"{name} ({choices[name]}): {got}"
        wanted = choices[name].get("ATEN_CPU_CAPABILITY")
        assert wanted is None or got["torch_level"] == {"default": "baseline"}.get(wanted, wanted), (name, got)
    for library in ("numpy", "torch"):
        levels = {got[f"{library}_level"] for got in results.values()}
        probes = {got[f"probe_{library}"] for got in results.values()}
        assert len(probes) == len(levels), f"{library}'s kernels did not change with its level: {results}"
    if CpuKernels.of_this_process().x86:
        assert len(results) >= 2, results  # at least the baseline beside the machine's own


def test_kernel_choices_for_an_avx2_only_cpu_leave_avx512_out():
    """An AVX2-only x86 CPU as torch and numpy 2.4 report it (the AMD EPYC of issue 43): no choice forces
    AVX-512 (torch would die of SIGILL), the AVX-512 choice is named as left out, and the others remain."""
    avx2_only = CpuKernels(torch_capability="AVX2", numpy_baseline=["X86_V2"], x86=True,
                           numpy_features={"X86_V2": True, "X86_V3": True, "X86_V4": False, "AVX2": True})
    choices, left_out = _kernel_choices(avx2_only)
    assert set(choices) == {"machine's own", "numpy baseline, torch default"}
    assert choices["numpy baseline, torch default"] == {"NPY_ENABLE_CPU_FEATURES": "X86_V2",
                                                        "ATEN_CPU_CAPABILITY": "default"}
    assert not any("avx512" in v.lower() or "X86_V4" in v for env in choices.values() for v in env.values())
    assert len(left_out) == 1 and left_out[0].startswith("numpy AVX-512, torch avx512: numpy avx512 kernels left out")
    # the same CPU behind numpy < 2.4's feature names, and an aarch64 CPU: only the baseline is forced
    old_numpy = CpuKernels("AVX2", {f: True for f in ("SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "POPCNT", "SSE42",
                                                      "AVX", "F16C", "FMA3", "AVX2")} | {"AVX512F": False},
                           ["SSE", "SSE2", "SSE3"], True)
    assert old_numpy.numpy_level() == "avx2"
    assert old_numpy.env(numpy="avx2")["NPY_ENABLE_CPU_FEATURES"] == \
        "SSE,SSE2,SSE3,SSSE3,SSE41,POPCNT,SSE42,AVX,F16C,FMA3,AVX2"
    arm = CpuKernels("SVE256", {"NEON": True, "ASIMD": True}, ["NEON"], False)
    assert _kernel_choices(arm)[0] == {"machine's own": {}, "numpy baseline, torch default": {
        "NPY_ENABLE_CPU_FEATURES": "NEON", "ATEN_CPU_CAPABILITY": "default"}}


def test_simd_command_prints_an_offered_choice_and_refuses_one_above_the_cpu():
    """What `make test-matrix` asks before each cell, run as a command under an emulated AVX2-only parent."""
    cpu = CpuKernels.of_this_process()
    if not cpu.offers("torch", "avx2") or not cpu.offers("numpy", "avx2"):
        pytest.skip(f"this CPU offers no AVX2 kernels to emulate an AVX2-only machine with ({cpu})")
    emulated = child_env(cpu.env(numpy="avx2", torch="avx2"))
    cmd = [sys.executable, "-m", "elasticface.cli.simd", "env"]
    ok = subprocess.run([*cmd, "torch=avx2", "numpy=baseline"], env=emulated, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [f"NPY_ENABLE_CPU_FEATURES={cpu.numpy_enable('baseline')}", "ATEN_CPU_CAPABILITY=avx2"]
    refused = subprocess.run([*cmd, "torch=avx512"], env=emulated, capture_output=True, text=True)
    assert refused.returncode == 3 and refused.stdout == ""
    assert refused.stderr.strip() == \
        "torch avx512 kernels left out: this CPU (as this process sees it) offers torch up to AVX2"


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
