"""`elasticface-compare A B weights=...` and `elasticface-embed --align`: the cosine of the protocol's embeddings
(written out here: face + mirror through the model, L2-normalised), the verdict at a given threshold or the one
eval.py stores beside the weights, raw photos aligned by insightface's rule first."""

from __future__ import annotations

import json

import numpy as np
import pytest
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
    code = compare_main([str(a) for a in args] + ["--allow-torchscript"])
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


def test_eval_stores_the_threshold_compare_uses(model_dir, tmp_path, capsys):
    root, model = model_dir
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
    (tmp_path / "bins").mkdir()
    write_bin(str(tmp_path / "bins" / "lfw.bin"), images, issame)
    weights = tmp_path / "model.pt"
    weights.write_bytes((root / "model.pt").read_bytes())
    from elasticface.eval.run import evaluate

    cfg = compose_eval([f"weights={weights}", f"data.val_root={tmp_path / 'bins'}", "data.val_sets=[lfw]", "device=cpu",
                        "num_workers=0", "plots=false", "allow_torchscript=true"])
    (row,) = evaluate(cfg, output_dir=str(tmp_path / "eval"))
    assert "thresholds for elasticface-compare" in capsys.readouterr().out
    stored = json.loads((tmp_path / "model.pt.thresholds.json").read_text())
    # squared L2 between unit vectors is 2 - 2 cos: the protocol's distance threshold as a cosine
    assert stored["lfw"]["cosine"] == pytest.approx(1 - row["threshold"] / 2, abs=1e-12)
    assert stored["lfw"]["acc"] == row["acc"] and stored["lfw"]["pairs"] == 20
    code, out, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={weights}", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["threshold"] == pytest.approx(1 - row["threshold"] / 2)
    assert result["threshold_from"] == "lfw, stored with the weights"
    assert result["same"] == (result["cosine"] > result["threshold"])
    code, _, err = _run(capsys, root / "face_a.png", root / "face_b.png", f"weights={weights}", "--set", "agedb_30")
    assert code == 2 and "agedb_30" in err and "['lfw']" in err


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
