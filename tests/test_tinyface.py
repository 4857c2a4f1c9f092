"""TinyFace: the rule against AdaFace's, written here from its `tinyface_helper.py` (a full score matrix, each row's
labels sorted by score, found at rank k when a mate is among the first k), the release layout and its bad inputs, and
`python eval.py tinyface.root=...` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, compose_eval
from helpers.images import png_declaring
from elasticface.eval.identification.tinyface import (ALIGNED_COPY, RELEASE, cmc, find_folder, identity, mate_ranks,
                                                      read_tinyface)
from elasticface.utils.errors import BadValue, MissingPath


def adaface_ranks(probe_feats, probe_labels, gallery_feats, gallery_labels, ranks):
    """AdaFace's closed-set identification (DIR_FAR with FARs=[1.0]): probes with a mate only; scores are inner
    products of normalised features; a probe counts at rank k when any mate is among its k best-scoring images."""
    p = probe_feats / np.linalg.norm(probe_feats, axis=1, keepdims=True)
    g = gallery_feats / np.linalg.norm(gallery_feats, axis=1, keepdims=True)
    score_mat = p @ g.T
    label_mat = np.asarray(probe_labels)[:, None] == np.asarray(gallery_labels)[None, :]
    with_mate = label_mat.any(axis=1)
    score_mat, label_mat = score_mat[with_mate], label_mat[with_mate]
    out = []
    for rank in ranks:
        found = []
        for row in range(len(score_mat)):
            order = np.argsort(score_mat[row])[::-1]
            found.append(label_mat[row, order][:rank].any())
        out.append(float(np.mean(found)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranks_equal_adafaces_rule(seed):
    """Identities with several gallery matches, distractors that sometimes beat the mates, probes without a match
    (left out by both): every rank of the CMC equals AdaFace's."""
    rng = np.random.default_rng(seed)
    dim, identities = 16, 40
    centres = rng.normal(size=(identities, dim))
    match_ids = rng.integers(0, identities, 90)
    probe_ids = rng.integers(0, identities + 5, 70)  # identities 40-44 have no match
    noise = 0.8
    matches = centres[match_ids] + noise * rng.normal(size=(90, dim))
    probes = np.where((probe_ids < identities)[:, None], centres[np.minimum(probe_ids, identities - 1)], 0) \
        + noise * rng.normal(size=(70, dim))
    distractors = rng.normal(size=(300, dim)) * 1.5
    gallery = np.concatenate([matches, distractors]).astype(np.float32)
    gallery_labels = list(match_ids) + [-100] * len(distractors)
    expected = adaface_ranks(probes.astype(np.float32), probe_ids, gallery, gallery_labels, list(range(1, 21)))

    keep = np.isin(probe_ids, match_ids)
    unit = lambda a: torch.nn.functional.normalize(torch.as_tensor(a, dtype=torch.float32), dim=1)  # noqa: E731
    found_at = mate_ranks(unit(probes[keep]), [str(i) for i in probe_ids[keep]], unit(gallery),
                          [str(i) for i in match_ids] + [None] * len(distractors), batch=16)
    assert cmc(found_at, 20) == pytest.approx(expected, abs=0)
    assert 0.2 < expected[0] < 0.95 and expected[0] < expected[19]  # neither trivial nor hopeless


def test_identity_is_the_prefix_before_the_first_underscore():
    assert identity("1234_5.jpg") == "1234" and identity("Probe/77_1_b.png") == "77"
    assert identity("nounderscore.jpg") is None and identity("_5.jpg") is None


# -- the layout and its bad inputs ----------------------------------------------------------------------------


def _face(path, colour, size=(24, 20), seed=0):
    """A small face (TinyFace's are about 20 px): one colour with noise, saved as a JPEG of `size` (w, h)."""
    rng = np.random.default_rng(seed)
    arr = np.clip(np.asarray(colour, float) + rng.normal(0, 10, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path, quality=95)


COLOURS = {"1": (200, 40, 40), "2": (40, 200, 40), "3": (40, 40, 200), "4": (200, 200, 40)}


def write_split(folder, distractors=12, extra=()):
    """Probe/ (two per identity), Gallery_Match/ (one per identity), Gallery_Distractor/ (grey-ish faces)."""
    for ident, colour in COLOURS.items():
        for n in (1, 2):
            _face(os.path.join(folder, "Probe", f"{ident}_{n}.jpg"), colour, seed=int(ident) * 10 + n)
        _face(os.path.join(folder, "Gallery_Match", f"{ident}_3.jpg"), colour, size=(30, 36), seed=int(ident))
    rng = np.random.default_rng(5)
    for n in range(distractors):
        _face(os.path.join(folder, "Gallery_Distractor", f"d{n}.jpg"), rng.integers(90, 160, 3), seed=100 + n)
    for name in extra:
        _face(os.path.join(folder, name), (128, 128, 128), seed=999)


def test_the_folder_is_found_where_the_release_or_adafaces_copy_puts_it(tmp_path):
    write_split(str(tmp_path / "a"))
    assert find_folder(str(tmp_path / "a")) == str(tmp_path / "a")
    write_split(str(tmp_path / "b" / RELEASE))
    assert find_folder(str(tmp_path / "b")) == str(tmp_path / "b" / RELEASE)
    write_split(str(tmp_path / "b" / ALIGNED_COPY))  # the aligned copy beside the release is preferred
    assert find_folder(str(tmp_path / "b")) == str(tmp_path / "b" / ALIGNED_COPY)


def test_bad_layouts_are_said_in_one_line(tmp_path):
    (tmp_path / "none" / "Probe").mkdir(parents=True)
    with pytest.raises(MissingPath, match=r"no Gallery_Match/, Gallery_Distractor/ there, nor under "
                                          r"aligned_pad_0.1_pad_high/ or tinyface/Testing_Set/"):
        find_folder(str(tmp_path / "none"))
    write_split(str(tmp_path / "empty"), distractors=0)
    (tmp_path / "empty" / "Gallery_Distractor").mkdir(exist_ok=True)
    with pytest.raises(BadValue, match=r"empty/Gallery_Distractor: no images"):
        read_tinyface(str(tmp_path / "empty"))
    write_split(str(tmp_path / "odd"), extra=["Probe/nounderscore.jpg", "Gallery_Match/x.jpg", "Probe/9_1.jpg"])
    split = read_tinyface(str(tmp_path / "odd"))
    assert len(split.probes) == 8 and len(split.matches) == 4 and len(split.distractors) == 12
    assert [p.split(":")[1].strip() for p in split.problems] == [
        "1 of 10 file names without an identity prefix '<identity>_' (left out; e.g. nounderscore.jpg)",
        "1 of 5 file names without an identity prefix '<identity>_' (left out; e.g. x.jpg)",
        "1 probe(s) whose identity has no image in Gallery_Match/ (left out, as the closed-set rule does; e.g. "
        "9_1.jpg)"]


# -- eval.py end to end -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    from elasticface.export import export_torchscript
    from helpers.pool_embedder import PoolEmbedder

    path = tmp_path_factory.mktemp("tinyface_model") / "model.pt"
    export_torchscript(PoolEmbedder().eval(), str(path))
    return path


def test_eval_tinyface_end_to_end(model_file, tmp_path, capsys, caplog):
    """Faces of any size resized to the input, every image embedded once with progress, the block, the row, the
    figure, and the last line naming it."""
    from elasticface.eval.run import evaluate

    caplog.set_level("INFO")
    write_split(str(tmp_path / "data" / RELEASE), extra=["Probe/9_1.jpg"])
    (tmp_path / "data" / RELEASE / "Probe" / "4_9.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")  # skipped, said
    # a stranger's file: a PNG header declaring 900 Mpx, refused before decoding and counted with the others
    (tmp_path / "data" / RELEASE / "Gallery_Distractor" / "77_1.png").write_bytes(png_declaring(30000, 30000))
    cfg = compose_eval([f"tinyface.root={tmp_path / 'data'}", f"weights={model_file}", "allow_torchscript=true",
                        "device=cpu", "num_workers=0", "batch_size=8"])
    rows = evaluate(cfg, output_dir=str(tmp_path / "out"))
    block = json.loads((tmp_path / "out" / "results.json").read_text())["tinyface"]
    assert block["rank1"] == 100.0 and block["rank5"] == 100.0 and block["rank20"] == 100.0  # colours: all found
    assert len(block["cmc"]) == 20 and block["probes"] == 8 and block["identities"] == 4
    assert block["gallery_matches"] == 4 and block["distractors"] == 12
    assert any("no image in Gallery_Match/" in p for p in block["problems"])
    assert any("2 of 26 images unreadable (skipped; first " in p and "4_9.jpg" in p for p in block["problems"])
    assert rows[-1]["benchmark"] == "TinyFace" and rows[-1]["rank1"] == 1.0 and rows[-1]["pairs"] == 8
    out = capsys.readouterr().out
    assert "TinyFace (closed set): 8 probes of 4 identities against 4 matches and 12 distractors; rank-1 100.00%" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("results: ") and str(tmp_path / "out" / "tinyface.png") in last.split()
    assert (tmp_path / "out" / "tinyface.png").stat().st_size > 5_000
    said = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"tinyface: embedding the 26 images under {tmp_path / 'data' / RELEASE}: 26 images in ")
               for line in said), said


def test_distractors_that_look_like_the_probes_push_the_mates_down(model_file, tmp_path):
    """Copies of identity 1's probes among the distractors outscore its match: rank-1 drops, rank-10 holds."""
    from elasticface.eval.run import evaluate

    folder = tmp_path / "split"
    write_split(str(folder))
    for n in (1, 2):
        _face(str(folder / "Gallery_Distractor" / f"copy{n}.jpg"), COLOURS["1"], seed=10 + n)
    cfg = compose_eval([f"tinyface.root={folder}", f"weights={model_file}", "allow_torchscript=true", "device=cpu",
                        "num_workers=0", "plots=false", "tinyface.ranks=[1,10]"])
    evaluate(cfg, output_dir=str(tmp_path / "out"))
    block = json.loads((tmp_path / "out" / "results.json").read_text())["tinyface"]
    assert block["rank1"] == 75.0 and block["rank10"] == 100.0 and len(block["cmc"]) == 10
    assert not (tmp_path / "out" / "tinyface.png").exists()


@pytest.mark.parametrize("make, words", [
    (lambda d: (d / "Probe").mkdir(parents=True), "no Gallery_Match/, Gallery_Distractor/ there"),
    (lambda d: write_split(str(d), distractors=0) or (d / "Gallery_Distractor").mkdir(),
     "Gallery_Distractor: no images"),
])
def test_eval_py_says_a_bad_tinyface_root_in_one_line(model_file, tmp_path, make, words):
    make(tmp_path / "tf")
    run = subprocess.run([sys.executable, str(ROOT / "eval.py"), f"tinyface.root={tmp_path / 'tf'}",
                          f"weights={model_file}", "allow_torchscript=true"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in run.stderr, run.stderr[-2000:]


def test_tinyface_pack_splits_people_and_reads_back(tmp_path, capsys):
    """One-photo people distract; people with several alternate by name between the test and train/; test photos
    alternate gallery, probe, named <identity>_<n>; the pack reads back as TinyFace; an output with files is refused."""
    from elasticface.cli.tinyface_pack import main

    photos = {"Ann": 1, "Bob": 3, "Cy": 2, "Dee": 5, "Eve": 1, "Fay": 2}
    for person, n in photos.items():
        for k in range(1, n + 1):
            _face(str(tmp_path / "faces" / person / f"{person}_{k:04d}.jpg"), (100, 100, 100), seed=k)
    assert main([str(tmp_path / "faces"), str(tmp_path / "pack"), "--max-photos", "4"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == ("test_people=2 probes=3 gallery_matches=4 distractors=2 "
                                                       "train_people=2 train_photos=4")
    pack = tmp_path / "pack"
    assert sorted(os.listdir(pack / "Gallery_Distractor")) == ["Ann_0001.jpg", "Eve_0001.jpg"]
    assert sorted(os.listdir(pack / "train")) == ["Cy", "Fay"]  # Bob, Cy, Dee, Fay by name: every other one trains
    assert sorted(os.listdir(pack / "Probe")) == ["1_2.jpg", "2_2.jpg", "2_4.jpg"]
    assert sorted(os.listdir(pack / "Gallery_Match")) == ["1_1.jpg", "1_3.jpg", "2_1.jpg", "2_3.jpg"]
    assert (pack / "identities.csv").read_text() == "identity,person\n1,Bob\n2,Dee\n"
    split = read_tinyface(str(pack))
    assert split.probe_ids == ["1", "2", "2"] and split.match_ids == ["1", "1", "2", "2"] and not split.problems
    assert main([str(tmp_path / "faces"), str(tmp_path / "pack")]) == 2
    assert "pack" in capsys.readouterr().err


LFW_ALIGNED = os.environ.get("ELASTICFACE_LFW_ALIGNED", "")
Y1 = os.environ.get("ELASTICFACE_Y1_PARAMS", "")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(LFW_ALIGNED), reason="set ELASTICFACE_LFW_ALIGNED to LFW aligned by "
                    "elasticface-align (<Name>/<Name>_NNNN.jpg)")
@pytest.mark.skipif(not os.path.isfile(Y1), reason="set ELASTICFACE_Y1_PARAMS to y1's model-0000.params")
def test_lfw_stand_in_with_y1_equals_adafaces_rule(tmp_path):
    """docs/evaluation.md's stand-in as typed (lowres, then the pack), y1 through eval.py; the same features scored
    by AdaFace's rule, the labels read from the file names here: every rank equal; and the published magnitudes."""
    from elasticface.cli.convert import main as convert
    from elasticface.data.folder import ImageFiles
    from elasticface.eval.embed import load_model_file
    from elasticface.eval.identification.images import embed_images
    from elasticface.eval.identification.tinyface_stand_in import build_tinyface_pack
    from elasticface.eval.run import evaluate

    assert convert(["lowres", LFW_ALIGNED, str(tmp_path / "lowres"), "--size", "16-32"]) == 0
    counts = build_tinyface_pack(str(tmp_path / "lowres"), str(tmp_path / "pack"))
    assert counts["test_people"] == 840 and counts["distractors"] == 4068
    cfg = compose_eval([f"tinyface.root={tmp_path / 'pack'}", f"weights={Y1}", "device=cpu", "num_workers=0",
                        "plots=false"])
    evaluate(cfg, output_dir=str(tmp_path / "out"))
    block = json.loads((tmp_path / "out" / "results.json").read_text())["tinyface"]

    folders = {f: sorted(os.listdir(tmp_path / "pack" / f)) for f in ("Probe", "Gallery_Match", "Gallery_Distractor")}
    paths = [os.path.join(f, n) for f, names in folders.items() for n in names]
    features, ok = embed_images(load_model_file(Y1, "cpu"), ImageFiles(str(tmp_path / "pack"), paths, 112,
                                                                        skip_unreadable=True),
                                torch.float32, batch_size=256, flip=True, device="cpu", num_workers=0)
    assert ok.all()
    p = len(folders["Probe"])
    labels = lambda names: [int(n.split("_")[0]) for n in names]  # noqa: E731 - AdaFace's get_label
    expected = adaface_ranks(features[:p].numpy(), labels(folders["Probe"]), features[p:].numpy(),
                             labels(folders["Gallery_Match"]) + [-100] * len(folders["Gallery_Distractor"]),
                             [1, 5, 20])
    assert [block["rank1"], block["rank5"], block["rank20"]] == pytest.approx([100 * e for e in expected], abs=1e-9)
    assert block["probes"] == counts["probes"] and 40 < block["rank1"] < block["rank20"] < 95
