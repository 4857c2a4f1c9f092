"""MegaFace and MegaFace (R): the devkit's protocol against loops written from its description, the (R) rule,
the devkit's feature files, bad testpacks, and `python eval.py megaface.root=...` end to end."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import torch

from conftest import compose_eval
from elasticface.eval.identification.devkit_files import feature_bytes, read_feature, read_features, write_features
from elasticface.eval.identification.distractor_search import ProbeView, search_distractors
from elasticface.eval.identification.refine import EXTENSION, NOISE, refine_probes
from elasticface.metrics.roc import impostors_to_keep, roc_curve, tar_at_fars_top
from helpers.megaface_files import (devkit_bytes, devkit_oracle, distractor_names, evaluate_pack, probe_names,
                                    write_feature_files, write_images, write_lists, write_templatelists)
from helpers.roc_oracle import insightface_tar_row

FARS = (1e-3, 1e-2, 1e-1)


# -- the devkit's feature files ---------------------------------------------------------------------------


def test_feature_file_is_byte_for_byte_gen_megaface_writer(tmp_path):
    v = np.random.default_rng(0).normal(size=512).astype(np.float32)
    assert feature_bytes(v) == devkit_bytes(v)
    assert feature_bytes(v)[:16] == struct.pack("<4i", 512, 1, 4, 5) and len(feature_bytes(v)) == 16 + 4 * 512
    paths = [str(tmp_path / "facescrub" / "A" / f"A_{i}.png_algo.bin") for i in range(3)]
    feats = np.random.default_rng(1).normal(size=(3, 513)).astype(np.float32)
    write_features(paths, feats)
    assert open(paths[1], "rb").read() == devkit_bytes(feats[1])
    np.testing.assert_array_equal(read_feature(paths[2]), feats[2])
    problems = []
    back, ok = read_features(paths, problems, "x", np.float16)
    assert ok.all() and not problems and back.dtype == np.float16
    np.testing.assert_array_equal(back, feats.astype(np.float16))


def test_a_feature_file_of_the_wrong_size_is_named_and_skipped(tmp_path):
    paths = [str(tmp_path / f"{i}.bin") for i in range(4)]
    write_features(paths, np.ones((4, 8), np.float32))
    with open(paths[1], "r+b") as f:
        f.truncate(16 + 4 * 7)  # one value short
    with open(paths[2], "wb") as f:
        f.write(devkit_bytes(np.ones(9)))  # another dimension
    with pytest.raises(ValueError, match=r"1\.bin: 44 bytes"):
        read_feature(paths[1])
    problems = []
    feats, ok = read_features(paths, problems, "features")
    assert ok.tolist() == [True, False, False, True] and feats.shape == (4, 8)
    assert len(problems) == 1 and "2 of 4 feature files" in problems[0] and "1.bin" in problems[0]


# -- the protocol against an oracle -----------------------------------------------------------------------

COUNTS = {"Ann": 4, "Bob": 3, "Cy": 5, "Di": 2}


def _integer_pack(root, seed, n_distractors=60, dim=6):
    """Small integer features: every squared distance is exact in float16, float32 and float64, ties included,
    so the implementation and the oracle must agree exactly."""
    rng = np.random.default_rng(seed)
    probes = probe_names(COUNTS)
    ids = [p.split("/")[0] for p in probes]
    centres = {i: rng.integers(-3, 4, dim) for i in COUNTS}
    probe_feats = np.stack([centres[i] + rng.integers(-2, 3, dim) for i in ids]).astype(np.float32)
    distractors = distractor_names(n_distractors)
    dist_feats = rng.integers(-4, 5, (n_distractors, dim)).astype(np.float32)
    write_lists(root, probes, distractors)
    write_feature_files(os.path.join(root, "features"), probes, probe_feats, distractors, dist_feats)
    return probes, ids, probe_feats, distractors, dist_feats


def _oracle_numbers(probe_feats, ids, dist_feats, max_rank=10):
    cmc, genuine, impostors = devkit_oracle(probe_feats, ids, dist_feats, max_rank)
    labels = np.r_[np.ones(len(genuine), bool), np.zeros(len(impostors), bool)]
    return cmc, insightface_tar_row(np.r_[genuine, impostors], labels, FARS)


@pytest.mark.parametrize("seed,dtype,chunk", [(0, "float32", None), (1, "float16", 7), (2, "float16", 1)])
def test_protocol_equals_the_oracle_on_seeded_sets(tmp_path, seed, dtype, chunk):
    probes, ids, pf, distractors, df = _integer_pack(str(tmp_path), seed)
    res = evaluate_pack(None, tmp_path, sizes=[10, 50, 100], fars=FARS, seed=seed, dtype=dtype, chunk=chunk,
                        features=str(tmp_path / "features"), algo="algo")
    # the documented subsets: the first n of one permutation of the distractors, drawn by the seed
    order = np.random.default_rng(seed).permutation(len(distractors))
    assert list(res["raw"]["rank1"]) == ["10", "50", "60"]
    for n in (10, 50, 60):
        cmc, tar = _oracle_numbers(pf, ids, df[order[:n]])
        assert res["raw"]["cmc"][str(n)] == pytest.approx(cmc, abs=0) and res["raw"]["rank1"][str(n)] == cmc[0]
        assert res["refined"]["cmc"][str(n)] == res["raw"]["cmc"][str(n)]  # no noise listed: (R) is the same
        if n == 60:  # verification on every distractor: 100 were requested, more than the testpack holds
            assert [res["raw"][f"tar_at_far_{f:.0e}".replace("e-0", "e-")] for f in FARS] == tar
            assert res["raw"]["verification_distractors"] == 60
    assert res["summary"]["mate_pairs"] == sum(n * (n - 1) for n in COUNTS.values())
    assert any("100 distractors requested; the testpack holds 60" in p for p in res["problems"])
    assert 0 < res["raw"]["rank1"]["60"] < res["raw"]["rank1"]["10"] <= 1  # the oracle's numbers are not trivial


def test_protocol_equals_the_oracle_on_the_devkits_lists(tmp_path):
    probes, ids, pf, distractors, df = _integer_pack(str(tmp_path), 3, n_distractors=40)
    rng = np.random.default_rng(7)
    sets = {10: sorted(rng.choice(40, 10, replace=False)), 30: sorted(rng.choice(40, 30, replace=False))}
    chosen = [i for i in range(len(probes)) if i != 2]  # the devkit's probe list leaves Ann's third image out
    lists = str(tmp_path / "templatelists")
    write_templatelists(lists, [probes[i].replace(".png", ".jpg") for i in chosen], [f"id{ids[i]}" for i in chosen],
                        {s: [distractors[i] for i in rows] for s, rows in sets.items()})
    res = evaluate_pack(None, tmp_path, sizes=[10, 30], fars=FARS, templatelists=lists,
                        features=str(tmp_path / "features"), algo="algo", chunk=4)
    assert list(res["raw"]["rank1"]) == ["10", "30", "40"]
    for n, rows in [*sets.items(), (40, list(range(40)))]:
        cmc, tar = _oracle_numbers(pf[chosen], [ids[i] for i in chosen], df[rows])
        assert res["raw"]["cmc"][str(n)] == cmc
        if n == 30:
            assert [res["raw"][k] for k in ("tar_at_far_1e-3", "tar_at_far_1e-2", "tar_at_far_1e-1")] == tar
    assert res["summary"]["probes"] == len(chosen)


def _crafted(root):
    """2-D features whose ranks are worked out by hand in test_crafted_ranks_raw_and_refined."""
    probes = {"A/a1.png": (1, 0), "A/a2.png": (0.8, 0), "B/b1.png": (0, 1), "B/b2.png": (0, 0.5),
              "D/d1.png": (-1, 0), "D/d2.png": (-1, 0.2), "D/d3.png": (3, 3), "C/c1.png": (5, -5)}
    distractors = {"x/1/x1.jpg": (0.9, 0.05), "x/2/x2.jpg": (-3, 0), "x/3/x3.jpg": (2.5, 2.5)}
    write_lists(root, list(probes), list(distractors), probe_noises=["d3.png"], distractor_noises=["x/1/x1.jpg"])
    write_feature_files(os.path.join(root, "features"), list(probes), list(probes.values()), list(distractors),
                        list(distractors.values()))


def test_crafted_ranks_raw_and_refined(tmp_path):
    """Raw: (a1,a2) and (a2,a1) lose to x1 (0.0125 < 0.04): rank 2; the B pairs and (d1,d2), (d2,d1) rank 1;
    the mislabelled d3 = (3,3) is 25 and 23.84 from d1 and d2, beaten by x1, x2, x3 as the others' mate (rank 4)
    and by x3 (0.5) and x1 (13.1) as the probe (rank 3). Rank-1 = 4/10, rank-2 6/10, rank-3 8/10, rank-4 1.
    (R): x1 gets the coordinate 100 and d3 becomes D's clean centre, about (-0.995, 0.0995): every pair ranks 1.
    C has a single image: no mate, skipped."""
    _crafted(str(tmp_path))
    res = evaluate_pack(None, tmp_path, sizes=[3], fars=FARS, features=str(tmp_path / "features"), algo="algo",
                        max_rank=4, dtype="float32")
    assert res["raw"]["cmc"]["3"] == pytest.approx([0.4, 0.6, 0.8, 1.0])
    assert res["refined"]["cmc"]["3"] == [1.0, 1.0, 1.0, 1.0]
    assert res["summary"] == {"probes": 7, "identities": 3, "mate_pairs": 10, "distractors": 3, "noisy_probes": 1,
                              "noisy_distractors": 1}
    assert any("1 probe identity has one image" in p and "C" in p for p in res["problems"])


def test_refined_features_follow_remove_noises(tmp_path):
    """What remove_noises.py does, checked from its description: a listed probe becomes its identity's clean sum
    plus noise within +-0.001, normalised; a listed distractor's extra coordinate is 100, every other one 0."""
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(6, 16)).astype(np.float32)
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    ids = ["p", "p", "p", "q", "q", "r"]
    noisy = np.array([False, True, False, False, True, True])
    problems = []
    out = refine_probes(feats, ids, noisy, seed=3, problems=problems)
    np.testing.assert_array_equal(out[~noisy], feats[~noisy])
    np.testing.assert_array_equal(out[5], feats[5])  # r has no clean image: kept, and said
    assert len(problems) == 1 and "r" in problems[0]
    for i, clean in ((1, [0, 2]), (4, [3])):
        centre = feats[clean].sum(0, dtype=np.float64)
        assert np.linalg.norm(out[i]) == pytest.approx(1, abs=1e-6)
        # out = (centre + e) / |centre + e| with every |e_j| <= 0.001: some length t of out is within 0.001 of the
        # centre in every coordinate (t found by ternary search of the convex max-deviation), and not at 1e-5
        deviation = lambda t: np.abs(t * out[i].astype(np.float64) - centre).max()  # noqa: E731
        lo, hi = np.linalg.norm(centre) - 0.05, np.linalg.norm(centre) + 0.05
        for _ in range(200):
            a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
            lo, hi = (lo, b) if deviation(a) < deviation(b) else (a, hi)
        assert NOISE / 100 < deviation(lo) <= NOISE + 1e-6
    # the devkit's refined files, written by eval: 17 values, the last 0 for probes, 100 for a listed distractor
    _crafted(str(tmp_path))
    evaluate_pack(None, tmp_path, sizes=[3], fars=FARS, features=str(tmp_path / "features"), algo="algo",
                  devkit_out=str(tmp_path / "devkit"))
    clean = tmp_path / "devkit" / "feature_out_clean"
    x1 = read_feature(str(clean / "megaface" / "x" / "1" / "x1.jpg_algo.bin"))
    np.testing.assert_array_equal(x1, np.float32([0.9, 0.05, EXTENSION]))
    assert read_feature(str(clean / "megaface" / "x" / "2" / "x2.jpg_algo.bin")).tolist() == [-3, 0, 0]
    d3 = read_feature(str(clean / "facescrub" / "D" / "d3.png_algo.bin"))
    assert d3[2] == 0 and d3[:2] == pytest.approx([-0.995, 0.0995], abs=2e-3)
    assert read_feature(str(tmp_path / "devkit" / "feature_out" / "facescrub" / "D" / "d3.png_algo.bin")).tolist() == [
        3, 3]


# -- chunks: the ROC from the highest impostors, and the scan ---------------------------------------------


@pytest.mark.parametrize("decimals,seed", [(2, 0), (3, 1), (None, 2)])
def test_roc_from_the_highest_impostors_equals_the_full_roc(decimals, seed):
    rng = np.random.default_rng(seed)
    impostors, genuine = rng.normal(0, 0.1, 200_000), rng.normal(0.45, 0.15, 700)
    if decimals is not None:  # ties everywhere, also at the cut
        impostors, genuine = np.round(impostors, decimals), np.round(genuine, decimals)
    fars = (1e-5, 1e-4, 1e-3, 1e-2)
    keep = impostors_to_keep(len(impostors), fars)
    cut = np.sort(impostors)[::-1][keep - 1]
    top = impostors[impostors >= cut]
    want = insightface_tar_row(np.r_[genuine, impostors], np.r_[np.ones(700, bool), np.zeros(200_000, bool)], fars)
    tar, fpr, tpr = tar_at_fars_top(genuine, top, len(impostors), fars)
    assert list(tar.values()) == want
    # the curve it returns for plots is the full curve's start, ending at the cut with the counts above it
    full_fpr, full_tpr, _ = roc_curve(np.r_[genuine, impostors], np.r_[np.ones(700, bool), np.zeros(200_000, bool)])
    np.testing.assert_array_equal(fpr[:-1], full_fpr[: len(fpr) - 1])
    np.testing.assert_array_equal(tpr[:-1], full_tpr[: len(tpr) - 1])
    assert (fpr[-1], tpr[-1]) == (len(top) / len(impostors), (genuine >= cut).mean())
    with pytest.raises(ValueError, match="needs"):
        tar_at_fars_top(genuine, np.sort(impostors)[::-1][: keep - 1], len(impostors), fars)


def test_scan_keeps_every_impostor_above_its_cut_and_the_top_k(tmp_path):
    """The chunked scan against the dense score matrix it never builds."""
    g = torch.Generator().manual_seed(0)
    probes, dists = torch.randn(30, 8, generator=g), torch.randn(500, 8, generator=g)
    extra = torch.zeros(500)
    extra[::7] = 3.0
    views = [ProbeView(torch.arange(30), extra), ProbeView(torch.arange(30))]
    dense = -torch.cdist(probes.double(), dists.double()) ** 2
    got = search_distractors(probes, views, dists, torch.arange(500), [100, 500], verify_at=500, keep_impostors=321,
                             k=5, chunk=37)
    for res, add in zip(got, (extra.double(), 0.0)):
        scores = dense - add
        for at in (100, 500):
            torch.testing.assert_close(res.top[at].double(), scores[:, :at].topk(5, dim=1).values, atol=1e-4,
                                       rtol=0)
        kept = res.impostors.double().sort(descending=True).values
        assert res.num_impostors == 30 * 500 and len(kept) >= 321
        torch.testing.assert_close(kept, scores.flatten().sort(descending=True).values[: len(kept)], atol=1e-4,
                                   rtol=0)


@pytest.mark.gpu
def test_scan_on_the_gpu_equals_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    g = torch.Generator().manual_seed(0)
    probes = torch.nn.functional.normalize(torch.randn(300, 128, generator=g), dim=1)
    dists = torch.nn.functional.normalize(torch.randn(20_000, 128, generator=g), dim=1).half()
    views = [ProbeView(torch.arange(300))]
    args = dict(verify_at=20_000, keep_impostors=12_001, k=10, chunk=4096)
    cpu = search_distractors(probes, views, dists, torch.arange(20_000), [20_000], device="cpu", **args)[0]
    gpu = search_distractors(probes, views, dists.cuda(), torch.arange(20_000), [20_000], device="cuda", **args)[0]
    torch.testing.assert_close(gpu.top[20_000], cpu.top[20_000], atol=1e-5, rtol=0)
    assert abs(len(gpu.impostors) - len(cpu.impostors)) <= 2


# -- eval.py end to end, and a bad testpack ---------------------------------------------------------------

COLOURS = {"Ann": (200, 40, 40), "Bob": (40, 200, 40), "Cy": (40, 40, 200)}


@pytest.fixture(scope="module")
def image_pack(tmp_path_factory):
    from elasticface.export import export_torchscript
    from helpers.pool_embedder import PoolEmbedder

    root = tmp_path_factory.mktemp("megaface")
    probes = probe_names({"Ann": 3, "Bob": 3, "Cy": 3})
    distractors = distractor_names(24)
    write_images(str(root / "pack"), probes, distractors, COLOURS)
    write_lists(str(root / "pack"), probes, distractors, probe_noises=["Bob_2.png"], distractor_noises=[distractors[5]])
    export_torchscript(PoolEmbedder().eval(), str(root / "model.pt"))
    return root


def _eval(root, out, *overrides):
    from elasticface.eval.run import evaluate

    cfg = compose_eval([f"megaface.root={root / 'pack'}", "megaface.sizes=[10,100]", "device=cpu", "num_workers=0",
                        "batch_size=8", *overrides])
    rows = evaluate(cfg, output_dir=str(out))
    return rows, json.loads((out / "results.json").read_text())


def test_eval_megaface_end_to_end(image_pack, tmp_path, capsys, caplog):
    caplog.set_level("INFO")
    rows, results = _eval(image_pack, tmp_path / "a", f"weights={image_pack / 'model.pt'}", "allow_torchscript=true",
                          f"megaface.devkit_out={tmp_path / 'devkit'}", "megaface.algo=pool")
    block = results["megaface"]
    for view in ("raw", "refined"):
        assert list(block[view]["rank1"]) == ["10", "24"] and "tar_at_far_1e-6" in block[view]
        assert len(block[view]["cmc"]["10"]) == 10 and block[view]["verification_distractors"] == 24
    assert [r["benchmark"] for r in rows] == ["MegaFace", "MegaFace (R)"] and rows[0]["distractors"] == 24
    assert block["raw"]["rank1"]["24"] > 0.5  # colours tell the identities apart
    assert (tmp_path / "a" / "megaface.png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "MegaFace (R)" in out and "rank-1 %" in out and "TAR % at 24" in out
    said = [r.getMessage() for r in caplog.records]  # each embedding pass says how far it is, then its total
    for folder, count in (("facescrub_images", 9), ("megaface_images", 24)):
        assert any(line.startswith(f"megaface: embedding the {count} images under {image_pack / 'pack' / folder}: "
                                   f"{count} images in ") for line in said), said
    impostors = block["raw"]["impostor_pairs"]  # every (probe, distractor) pair of the 24: a FAR below 1/that is marked
    assert 0 < impostors <= 65 * 24 and "FAR 1e-06*" in out
    assert f"* {impostors:,} impostor pairs, fewer than 1/FAR: the TAR is at a threshold of the highest" in out
    dev = tmp_path / "devkit"
    assert len(list((dev / "feature_out" / "megaface").rglob("*_pool.bin"))) == 24
    assert len(read_feature(str(next((dev / "feature_out_clean" / "facescrub").rglob("*_pool.bin"))))) == 65
    # the devkit files read back (features=, no model) give the same numbers
    _, again = _eval(image_pack, tmp_path / "b", f"megaface.features={dev / 'feature_out'}", "megaface.algo=pool")
    for view in ("raw", "refined"):
        assert again["megaface"][view]["rank1"] == block[view]["rank1"]
        assert again["megaface"][view]["tar_at_far_1e-3"] == block[view]["tar_at_far_1e-3"]


def test_a_bad_testpack_is_said_line_by_line_and_the_rest_scored(image_pack, tmp_path):
    import shutil

    pack = tmp_path / "bad"
    shutil.copytree(image_pack / "pack", pack / "pack")
    os.remove(pack / "pack" / "facescrub_lst")                       # a missing list: the folder's images
    os.remove(pack / "pack" / "megaface_images" / distractor_names(24)[3])  # a listed image missing
    os.remove(pack / "pack" / "facescrub_images" / "Cy" / "Cy_2.png")
    os.remove(pack / "pack" / "facescrub_images" / "Cy" / "Cy_3.png")  # Cy: one image left, no mate
    with open(pack / "pack" / "megaface_noises.txt", "a") as f:
        f.write("no/such/image.jpg\n")                                # a noise line naming nothing
    (pack / "model.pt").symlink_to(image_pack / "model.pt")
    _, results = _eval(pack, tmp_path / "out", f"weights={pack / 'model.pt'}", "allow_torchscript=true",
                       "megaface.sizes=[10,30]")
    problems = results["megaface"]["problems"]
    expected = ["facescrub_lst missing", "1 of 24 listed images missing", "1 noise line(s) name no listed distractor",
                "30 distractors requested; the testpack holds 23", "1 probe identity has one image"]
    for words in expected:
        assert sum(words in p for p in problems) == 1, (words, problems)
    assert len(problems) == len(expected)
    assert list(results["megaface"]["raw"]["rank1"]) == ["10", "23"]
    assert results["megaface"]["summary"]["probes"] == 6


def test_passes_mix_the_devkits_lists_and_seeded_sets():
    from elasticface.eval.identification.planning import plan_passes

    available = np.arange(0, 80, 2)  # 40 readable distractors of 80
    problems = []
    passes = plan_passes(available, [10, 30, 1000], 5, {10: np.array([0, 1, 2, 4, 6, 8, 10, 12, 14, 16])}, problems)
    seeded, listed = passes
    assert seeded.checkpoints == [30, 40] and seeded.verify_at == 40 and sorted(seeded.order) == available.tolist()
    np.testing.assert_array_equal(seeded.order, available[np.random.default_rng(5).permutation(40)])
    assert listed.order.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16] and listed.labels == {9: 10}  # 1 unreadable
    assert problems == ["1,000 distractors requested; the testpack holds 40: the largest available (40) is reported"]
    passes = plan_passes(available, [10, 30], 5, {30: available[5:35]}, [])
    assert [p.verify_at for p in passes] == [0, 30] and passes[1].checkpoints == [30, 40]


# -- a stand-in from aligned faces --------------------------------------------------------------------------


def test_megaface_pack_splits_people_and_writes_the_layout(tmp_path, capsys):
    from PIL import Image

    from elasticface.cli.megaface_pack import main

    faces = tmp_path / "faces"
    for person, n in {"Many_A": 5, "Many_B": 4, "Few_C": 2, "One_D": 1, "One_E": 1}.items():
        (faces / person).mkdir(parents=True)
        for k in range(1, n + 1):
            Image.new("RGB", (112, 112), (k * 20, 90, 90)).save(faces / person / f"{person}_{k:04d}.jpg")
    (faces / "align_report.csv").write_text("source,problem,detail\nMany_A/Many_A_0002.jpg,several_faces,2 faces\n"
                                            "One_E/One_E_0001.jpg,several_faces,3 faces\nFew_C/x.jpg,no_face,\n")
    assert main([str(faces), str(tmp_path / "pack"), "--min-probe-photos", "4", "--max-probe-photos", "4"]) == 0
    assert "probe_people=2 probes=8 distractors=2 probe_noises=1 distractor_noises=1 train_people=1 train_photos=2" \
        in capsys.readouterr().out
    pack = tmp_path / "pack"
    lines = lambda name: [s for s in (pack / name).read_text().splitlines() if not s.startswith("#")]  # noqa: E731
    first = [f"Many_A/Many_A_000{k}.jpg" for k in (1, 2, 3, 4)]
    assert lines("facescrub_lst")[:5] == [*first, "Many_B/Many_B_0001.jpg"]
    assert lines("megaface_lst") == ["O/One_D/One_D_0001.jpg", "O/One_E/One_E_0001.jpg"]
    assert lines("facescrub_noises.txt") == ["Many_A_0002.jpg"] and lines("megaface_noises.txt") == [
        "O/One_E/One_E_0001.jpg"]
    assert sorted(p.name for p in (pack / "train" / "Few_C").iterdir()) == ["Few_C_0001.jpg", "Few_C_0002.jpg"]
    assert (pack / "megaface_images" / "O" / "One_D" / "One_D_0001.jpg").is_file()
    assert not (pack / "facescrub_images" / "Many_A" / "Many_A_0005.jpg").exists()  # --max-probe-photos 4
    from elasticface.eval.identification.testpack import read_testpack

    read = read_testpack(str(pack))
    assert not read.problems and read.probe_noise.sum() == 1 and read.distractor_noise.tolist() == [False, True]


LFW_ALIGNED = os.environ.get("ELASTICFACE_LFW_ALIGNED", "")
Y1 = os.environ.get("ELASTICFACE_Y1_PARAMS", "")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(LFW_ALIGNED), reason="set ELASTICFACE_LFW_ALIGNED to LFW aligned by "
                    "elasticface-align (<Name>/<Name>_NNNN.jpg and align_report.csv)")
@pytest.mark.skipif(not os.path.isfile(Y1), reason="set ELASTICFACE_Y1_PARAMS to y1's model-0000.params")
def test_lfw_stand_in_with_y1(tmp_path):
    """docs/evaluation.md's stand-in, smaller (probe people with 20+ photos, 10 each): y1 finds most mates among
    LFW's 4,068 one-photo people, and MegaFace (R) (the aligner's several-face photos as noise) is not lower."""
    from elasticface.eval.identification.stand_in import build_megaface_pack

    counts = build_megaface_pack(LFW_ALIGNED, str(tmp_path / "pack"), 20, 10)
    assert counts["probe_people"] == 62 and counts["distractors"] == 4068
    rows, results = _eval(tmp_path, tmp_path / "out", f"weights={Y1}", "megaface.sizes=[10,100,1000,10000]")
    block = results["megaface"]
    assert block["raw"]["verification_distractors"] == 4068 and list(block["raw"]["rank1"])[-1] == "4068"
    assert 0.8 < block["raw"]["rank1"]["4068"] <= block["refined"]["rank1"]["4068"]
    assert block["raw"]["rank1"]["10"] >= block["raw"]["rank1"]["4068"]


def test_the_roc_marks_the_smallest_far_the_impostors_can_give():
    """A pack of 216 impostor pairs has no threshold at FAR 1e-3: the figure draws 1/216 so a TAR read left of it
    is seen as the highest impostor's, as the table's `*` says."""
    import matplotlib

    matplotlib.use("Agg")
    from elasticface.eval.plots import identification_figure

    view = {"rank1": {"10": 0.9, "24": 0.8}, "cmc": [0.8, 0.9], "roc": ([0.0, 1 / 216, 1.0], [0.5, 0.7, 1.0]),
            "impostors": 216}
    roc_axes = identification_figure({"MegaFace": view}).axes[2]
    marks = [line for line in roc_axes.get_lines() if line.get_label() == "1 / 216 impostor pairs"]
    assert len(marks) == 1 and marks[0].get_xdata()[0] == 1 / 216
    assert not [line for line in identification_figure({"MegaFace": {**view, "impostors": None}}).axes[2].get_lines()
                if "impostor" in line.get_label()]
