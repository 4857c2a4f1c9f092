"""`elasticface-compare A B weights=...` and `elasticface-embed --align`: the cosine of the protocol's embeddings
(written out here: face + mirror through the model, L2-normalised), the verdict at a given threshold or the one
eval.py stored in its run folder, raw photos aligned by insightface's rule first."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.exit_status import exit_status
import torch
from PIL import Image

from conftest import compose_eval
from elasticface.cli.compare import main as compare_main
from elasticface.cli.embed import main as embed_main
from elasticface.data.pair_files import write_bin
from elasticface.export import export_torchscript

skdata = pytest.importorskip("skimage.data")
cv2 = pytest.importorskip("cv2")
from helpers.pool_embedder import PoolEmbedder  # noqa: E402
from helpers.insightface_align import ASTRONAUT_LANDMARKS, insightface_crop  # noqa: E402


def protocol_cosine(model, face_a, face_b):
    """The verification protocol, written out: (x/255 - 0.5)/0.5, embed(x) + embed(mirror x), normalise, dot."""
    out = []
    for face in (face_a, face_b):
        x = (torch.tensor(np.asarray(face), dtype=torch.float32).permute(2, 0, 1)[None] / 255 - 0.5) / 0.5
        with torch.no_grad():
            e = model(x) + model(torch.flip(x, dims=[3]))
        out.append(e[0] / e[0].norm())
    return float(out[0] @ out[1])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    model = PoolEmbedder().eval()
    export_torchscript(model, str(root / "model.pt"))
    photo = skdata.astronaut()
    face = insightface_crop(photo, ASTRONAUT_LANDMARKS)
    Image.fromarray(face).save(root / "face_a.png")
    other = insightface_crop(photo, ASTRONAUT_LANDMARKS + [[3, 2], [1, -2], [0, 4], [-2, 1], [2, 0]])
    Image.fromarray(other).save(root / "face_b.png")
    Image.fromarray(photo[:300, 80:380].copy()).save(root / "raw_a.png")  # the face, not yet aligned
    Image.fromarray(np.full((200, 200, 3), 70, np.uint8)).save(root / "flat.png")
    return root, model


def _run(capsys, *args) -> tuple[int, str, str]:
    """The command on the test model, a TorchScript file (a program, so it is opened only when allowed)."""
    code = exit_status(compare_main, [str(a) for a in args] + ["--allow-torchscript"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_aligned_faces_cosine_and_given_threshold(model_dir, capsys):
    root, model = model_dir
    expected = protocol_cosine(model, Image.open(root / "face_a.png"), Image.open(root / "face_b.png"))
    for threshold, same in ((expected - 0.01, True), (expected + 0.01, False)):
        code, out, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={root / 'model.pt'}",
                              "--threshold", threshold, "--json", "--device", "cpu")
        assert code == 0, err
        result = json.loads(out)
        assert result["cosine"] == pytest.approx(expected, abs=1e-5)
        assert result["same"] is same and result["threshold"] == threshold
        assert result["aligned"] == ["as given", "as given"]
    code, out, _ = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={root / 'model.pt'}",
                        "--threshold", expected - 0.01)
    assert out.startswith("same person: cosine") and "(given)" in out


def test_raw_photo_is_detected_and_aligned_first(model_dir, capsys):
    root, model = model_dir
    code, out, err = _run(capsys, root / "raw_a.png", root / "face_a.png", f"weights={root / 'model.pt'}",
                          "--json", "--device", "cpu")
    assert code == 0, err
    result = json.loads(out)
    assert result["aligned"] == ["detected", "as given"] and result["threshold"] is None and result["same"] is None
    # the reference crop from the detected landmarks, checked against the hand-read points: within a few px
    from elasticface.align.detector import MTCNNDetector

    raw = np.asarray(Image.open(root / "raw_a.png"))
    (face,) = MTCNNDetector().detect([raw])[0]
    np.testing.assert_allclose(face.landmarks, ASTRONAUT_LANDMARKS - [80, 0], atol=3.0)
    expected = protocol_cosine(model, insightface_crop(raw, face.landmarks), Image.open(root / "face_a.png"))
    assert result["cosine"] == pytest.approx(expected, abs=2e-3)  # warps agree to one grey level


def _small_lfw_bin(root, folder):
    """20 pairs of noisy copies of one face (same) and noise (different), as lfw.bin in `folder`."""
    rng = np.random.default_rng(0)
    base = np.asarray(Image.open(root / "face_a.png"))
    images, issame = [], []
    for p in range(20):
        a = np.clip(base.astype(int) + rng.integers(-60, 61, base.shape), 0, 255).astype(np.uint8)
        same = p % 2 == 0
        b = np.clip(a.astype(int) + rng.integers(-30, 31, a.shape), 0, 255).astype(np.uint8) if same else \
            rng.integers(0, 256, base.shape, dtype=np.uint8)
        images += [a, b]
        issame.append(same)
    folder.mkdir()
    write_bin(str(folder / "lfw.bin"), images, issame)


def test_eval_stores_the_threshold_in_its_run_folder_and_compare_finds_it(model_dir, tmp_path, capsys, monkeypatch):
    """The thresholds go into the eval run's folder, nothing beside the weights (a repository, a shared or
    read-only folder); compare finds them under logs/eval of where it starts, by the weights' bytes."""
    root, model = model_dir
    _small_lfw_bin(root, tmp_path / "bins")
    models = tmp_path / "models"
    models.mkdir()
    weights = models / "model.pt"
    weights.write_bytes((root / "model.pt").read_bytes())
    from elasticface.eval.run import evaluate

    cfg = compose_eval([f"weights={weights}", f"data.val_root={tmp_path / 'bins'}", "data.val_sets=[lfw]", "device=cpu",
                        "num_workers=0", "plots=false", "allow_torchscript=true"])
    run_dir = tmp_path / "logs" / "eval" / "runs" / "one"
    (row,) = evaluate(cfg, output_dir=str(run_dir))
    assert f"thresholds for elasticface-compare: {run_dir / 'thresholds.json'}" in capsys.readouterr().out
    assert sorted(p.name for p in models.iterdir()) == ["model.pt"], "nothing is written beside the weights"
    stored = json.loads((run_dir / "thresholds.json").read_text())
    # squared L2 between unit vectors is 2 - 2 cos: the protocol's distance threshold as a cosine
    assert stored["sets"]["lfw"]["cosine"] == pytest.approx(1 - row["threshold"] / 2, abs=1e-12)
    assert stored["sets"]["lfw"]["acc"] == row["acc"] and stored["sets"]["lfw"]["pairs"] == 20
    assert stored["weights"] == str(weights)
    monkeypatch.chdir(tmp_path)  # logs/eval here: the default place compare searches
    code, out, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={weights}", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["threshold"] == pytest.approx(1 - row["threshold"] / 2)
    assert result["threshold_from"] == "lfw, eval run logs/eval/runs/one"
    assert result["same"] == (result["cosine"] > result["threshold"])
    code, _, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={weights}", "--set", "agedb_30")
    assert code == 2 and "agedb_30" in err and "['lfw']" in err
    # elsewhere, the run named with --thresholds (its file or its folder); the same bytes under another name match
    monkeypatch.chdir(models)
    copy = models / "copy.pt"
    copy.write_bytes(weights.read_bytes())
    for given in (run_dir, run_dir / "thresholds.json"):
        code, out, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={copy}", "--json",
                              "--thresholds", str(given))
        assert code == 0 and json.loads(out)["threshold"] == pytest.approx(1 - row["threshold"] / 2), err
    # a run of other bytes: skipped in a search, an error when named directly
    other = models / "other.pt"
    other.write_bytes(weights.read_bytes() + b"\0")
    code, out, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={other}", "--json",
                          "--thresholds", str(tmp_path / "logs"))
    assert code == 0 and json.loads(out)["threshold"] is None, err
    code, _, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={other}",
                        "--thresholds", str(run_dir / "thresholds.json"))
    assert code == 2 and "thresholds.json: measured on a model file with SHA-256" in err and str(other) in err
    code, _, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={weights}",
                        "--thresholds", str(tmp_path / "nowhere"))
    assert code == 2 and f"--thresholds {tmp_path / 'nowhere'}: not found" in err


def test_eval_never_writes_beside_read_only_weights_and_old_files_are_read(model_dir, tmp_path, capsys):
    """Weights in a folder nobody may write into (root included: the "folder" for the old file's name is a
    file), and an old `<weights>.thresholds.json` beside weights elsewhere: eval succeeds, compare reads both,
    a newer run's threshold first."""
    root, model = model_dir
    _small_lfw_bin(root, tmp_path / "bins")
    (tmp_path / "ro").mkdir()
    weights = tmp_path / "ro" / "model.pt"
    weights.write_bytes((root / "model.pt").read_bytes())
    (tmp_path / "ro" / "model.pt.thresholds.json").mkdir()  # no file can be written under this name
    (tmp_path / "ro").chmod(0o555)
    from elasticface.eval.run import evaluate

    try:
        cfg = compose_eval([f"weights={weights}", f"data.val_root={tmp_path / 'bins'}", "data.val_sets=[lfw]",
                            "device=cpu", "num_workers=0", "plots=false", "allow_torchscript=true"])
        (row,) = evaluate(cfg, output_dir=str(tmp_path / "run"))
        assert (tmp_path / "run" / "thresholds.json").is_file()
    finally:
        (tmp_path / "ro").chmod(0o755)
    capsys.readouterr()
    # an old file beside a copy of the weights, with lfw and cfp_fp: lfw from the run, cfp_fp from the old file
    (tmp_path / "old").mkdir()
    old_weights = tmp_path / "old" / "model.pt"
    old_weights.write_bytes(weights.read_bytes())
    (tmp_path / "old" / "model.pt.thresholds.json").write_text(json.dumps(
        {"lfw": {"distance": 1.0, "cosine": 0.5, "acc": 0.5, "pairs": 20, "flip": True},
         "cfp_fp": {"distance": 1.2, "cosine": 0.4, "acc": 0.5, "pairs": 20, "flip": True}}))
    for set_name, expected, source in (("lfw", 1 - row["threshold"] / 2, f"lfw, eval run {tmp_path / 'run'}"),
                                       ("cfp_fp", 0.4, "cfp_fp, stored with the weights")):
        code, out, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={old_weights}", "--json",
                              "--set", set_name, "--thresholds", str(tmp_path / "run"))
        assert code == 0, err
        result = json.loads(out)
        assert result["threshold"] == pytest.approx(expected) and result["threshold_from"] == source
    (tmp_path / "old" / "model.pt.thresholds.json").write_text("{not json")
    code, _, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={old_weights}")
    assert code == 2 and "model.pt.thresholds.json: not JSON" in err


def test_bad_photos_are_named(model_dir, tmp_path, capsys):
    root, _ = model_dir
    code, _, err = _run(capsys, root / "flat.png", root / "face_a.png", f"weights={root / 'model.pt'}")
    assert code == 2 and "flat.png: no face found" in err
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    code, _, err = _run(capsys, tmp_path / "broken.jpg", root / "face_a.png", f"weights={root / 'model.pt'}")
    assert code == 2 and "broken.jpg" in err and "not a readable" in err
    code, _, err = _run(capsys, root / "raw_a.png", root / "face_a.png", f"weights={root / 'model.pt'}",
                        "--align", "never")
    assert code == 2 and "raw_a.png" in err and "not an aligned 112x112" in err


def test_embed_align_embeds_raw_photos(model_dir, tmp_path, capsys):
    root, model = model_dir
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("raw_a.png", "flat.png"):
        (photos / name).write_bytes((root / name).read_bytes())
    out = tmp_path / "emb.npy"
    assert embed_main(["--weights", str(root / "model.pt"), "--images", str(photos), "--out", str(out),
                       "--align", "--device", "cpu", "--allow-torchscript"]) == 0
    assert "1 no face" in capsys.readouterr().out
    emb = np.load(out)
    assert (tmp_path / "emb.txt").read_text().split() == ["raw_a.png"]
    face = Image.open(tmp_path / "emb_faces" / "raw_a.png")
    expected = protocol_cosine(model, face, face)  # 1.0; the row itself:
    x = (torch.tensor(np.asarray(face), dtype=torch.float32).permute(2, 0, 1)[None] / 255 - 0.5) / 0.5
    with torch.no_grad():
        e = (model(x) + model(torch.flip(x, dims=[3])))[0]
    np.testing.assert_allclose(emb[0], (e / e.norm()).numpy(), atol=1e-5)
    assert expected == pytest.approx(1.0)
