"""MTCNN here against facenet-pytorch's own MTCNN code run on the same weights: the same faces, landmarks within
1 px, on scikit-image's astronaut photo and rotated, scaled, flipped and grey versions of it (one batch here,
photo by photo there)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from elasticface.align import mtcnn
from elasticface.align.detector import MTCNNDetector

pytest.importorskip("facenet_pytorch", reason="make install puts facenet-pytorch 2.6.0 (no deps) in the venv")
skdata = pytest.importorskip("skimage.data")

MIN_FACE = 40  # a shorter pyramid than the default 20 px keeps the test fast; the face is ~90 px


def variants() -> dict[str, np.ndarray]:
    photo = Image.fromarray(skdata.astronaut())
    return {
        "original": np.asarray(photo),
        "rotated": np.asarray(photo.rotate(20, resample=Image.BILINEAR, expand=True)),
        "scaled_down": np.asarray(photo.resize((300, 300), Image.BILINEAR)),
        "scaled_up": np.asarray(photo.resize((600, 560), Image.BILINEAR)),
        "flipped": np.asarray(photo.transpose(Image.FLIP_LEFT_RIGHT)),
        "grey": np.asarray(photo.convert("L")),
    }


def reference(photo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from facenet_pytorch import MTCNN

    rgb = np.repeat(photo[:, :, None], 3, 2) if photo.ndim == 2 else photo
    boxes, probs, points = MTCNN(keep_all=True, min_face_size=MIN_FACE, select_largest=False,
                                 device="cpu").detect(rgb, landmarks=True)
    if boxes is None:
        return np.zeros((0, 4)), np.zeros((0, 5, 2))
    # facenet-pytorch under numpy 2 hands back object arrays
    return np.array(boxes.tolist(), dtype=np.float64), np.array(points.tolist(), dtype=np.float64)


@pytest.fixture(scope="module")
def detector() -> MTCNNDetector:
    return MTCNNDetector(min_face_size=MIN_FACE)


def test_batch_matches_reference_within_one_pixel(detector):
    photos = variants()
    found = detector.detect(list(photos.values()))
    for (name, photo), faces in zip(photos.items(), found):
        ref_boxes, ref_points = reference(photo)
        assert len(faces) == len(ref_boxes) >= 1, name
        ours = np.stack([f.landmarks for f in faces])
        np.testing.assert_allclose(ours, ref_points, atol=1.0, err_msg=name)
        np.testing.assert_allclose(np.stack([f.box for f in faces]), ref_boxes, atol=1.0, err_msg=name)
        assert all(0.0 < f.score <= 1.0 for f in faces)


@pytest.mark.slow
def test_default_settings_match_reference_on_the_original():
    from facenet_pytorch import MTCNN

    photo = skdata.astronaut()
    faces = MTCNNDetector().detect([photo])[0]
    _, _, points = MTCNN(keep_all=True, device="cpu").detect(photo, landmarks=True)
    assert len(faces) == len(points) == 1
    np.testing.assert_allclose(faces[0].landmarks, np.array(points.tolist(), dtype=np.float64)[0], atol=1.0)


@pytest.mark.parametrize("grow", [(0.2, 0.2, 0.2, 0.2), (0.1, 0.3, 0.3, 0.1)], ids=["even", "uneven"])
def test_a_face_filling_the_photo_gets_the_landmarks_of_the_loose_photo(detector, grow):
    """The astronaut cut to her landmarks' box grown by 10-30% a side (forehead and chin cut off): the plain
    cascade loses her or her landmarks; the second search, in a grey border, finds them within a few px of the
    whole photo's, about a tenth of the 42 px between her eyes (benchmarks/bench_tight_crops.py measures this on
    LFW)."""
    photo = skdata.astronaut()
    (loose,) = detector.detect([photo])[0]
    lo, hi = loose.landmarks.min(0), loose.landmarks.max(0)
    x0, y0 = np.floor(lo - np.array(grow[:2]) * (hi - lo)).astype(int)
    x1, y1 = np.ceil(hi + np.array(grow[2:]) * (hi - lo)).astype(int)
    tight = np.ascontiguousarray(photo[y0:y1, x0:x1])
    corner = np.array([x0, y0])
    (face,) = detector.detect([tight])[0]
    error = np.linalg.norm(face.landmarks + corner - loose.landmarks, axis=1)
    assert error.mean() <= 3.0 and error.max() <= 5.0, error
    plain = MTCNNDetector(min_face_size=MIN_FACE, pad=0.0).detect([tight])[0]
    assert not plain or min(np.linalg.norm(f.landmarks + corner - loose.landmarks, axis=1).mean() for f in plain) > 8


def test_tight_crop_benchmark_runs(tmp_path, capsys, monkeypatch):
    """benchmarks/bench_tight_crops.py on two small photos: it prints each tier before and after, and ratios."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_tight_crops

    photo = Image.fromarray(skdata.astronaut()).resize((256, 256), Image.BILINEAR)
    (tmp_path / "a").mkdir()
    photo.save(tmp_path / "a" / "a_0001.jpg")
    photo.transpose(Image.FLIP_LEFT_RIGHT).save(tmp_path / "a" / "a_0002.jpg")
    bench_tight_crops.main([str(tmp_path), "--count", "2", "--min-face-size", "40"])
    printed = capsys.readouterr().out
    assert "2 photos from" in printed and "a face in 2" in printed
    assert printed.count("after/before:") == 2 and "tight crops" in printed and "loose crops" in printed


def test_no_face_gives_an_empty_list(detector):
    flat = np.full((200, 160, 3), 128, np.uint8)
    assert detector.detect([flat]) == [[]]


def test_missing_or_wrong_weights_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="pip install --no-deps facenet-pytorch==2.6.0"):
        mtcnn.load_mtcnn(str(tmp_path))
    for name, (filename, _) in mtcnn.WEIGHT_FILES.items():
        (tmp_path / filename).write_bytes(b"not the weights")
    with pytest.raises(ValueError, match="pnet.pt.*SHA-256"):
        mtcnn.load_mtcnn(str(tmp_path))


@pytest.mark.gpu
def test_gpu_batch_matches_cpu(detector):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    photos = list(variants().values())
    on_gpu = MTCNNDetector(device="cuda", min_face_size=MIN_FACE).detect(photos)
    for cpu_faces, gpu_faces in zip(detector.detect(photos), on_gpu):
        assert len(cpu_faces) == len(gpu_faces)
        for a, b in zip(cpu_faces, gpu_faces):
            np.testing.assert_allclose(a.landmarks, b.landmarks, atol=1.0)
