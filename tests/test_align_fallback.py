"""`elasticface-align --fallback`: a benchmark's photos are all kept. A real face cut so tight and small that the
cascade (and its second search in a grey border) finds nothing is aligned from the later stages forced on the
whole photo; a photo with no face at all becomes its centre crop; each is named in align_report.csv, and
pairs2bin then keeps every pair, which it does not without the option."""

from __future__ import annotations

import csv
import pickle

import numpy as np
import pytest
from PIL import Image

from elasticface.align.detector import MTCNNDetector
from elasticface.align.fallback import CENTRE, FORCED, FORCED_MIN_SCORE, centre_face
from elasticface.align.template import norm_crop
from elasticface.cli.align import main as align_main
from elasticface.data.convert import pairs_to_bin
from helpers.images import smooth_image

pytest.importorskip("facenet_pytorch", reason="make install puts facenet-pytorch 2.6.0 (no deps) in the venv")
skdata = pytest.importorskip("skimage.data")

SIDE = 14  # px: below the default 20 px minimum face, the astronaut's face cut to its landmarks' box + 10%


@pytest.fixture(scope="module")
def detector() -> MTCNNDetector:
    return MTCNNDetector()


@pytest.fixture(scope="module")
def astronaut(detector):
    photo = skdata.astronaut()
    (loose,) = detector.detect([photo])[0]
    lo, hi = loose.landmarks.min(0), loose.landmarks.max(0)
    x0, y0 = np.floor(lo - 0.1 * (hi - lo)).astype(int)
    x1, y1 = np.ceil(hi + 0.1 * (hi - lo)).astype(int)
    tight = np.asarray(Image.fromarray(photo[y0:y1, x0:x1]).resize((SIDE, SIDE), Image.BILINEAR))
    # where the loose photo's landmarks fall in the small tight crop
    expected = (loose.landmarks - [x0, y0]) * SIDE / np.array([x1 - x0, y1 - y0])
    return photo, tight, expected


def test_forced_stages_find_the_face_the_cascade_misses(detector, astronaut):
    _, tight, expected = astronaut
    assert detector.detect([tight])[0] == [], "the cascade, second search included, finds no face in it"
    face = detector.force(tight)
    assert face.score >= FORCED_MIN_SCORE
    eyes = np.linalg.norm(expected[0] - expected[1])
    assert np.linalg.norm(face.landmarks - expected, axis=1).mean() < 0.2 * eyes


def test_forced_stages_on_no_face_give_a_low_probability(detector):
    for photo in (np.full((120, 100, 3), 128, np.uint8), smooth_image(3, (100, 120))):
        assert detector.force(photo).score < FORCED_MIN_SCORE


def test_centre_face_warps_the_central_square():
    photo = smooth_image(5, (120, 160))  # 120 high, 160 wide
    face = centre_face(160, 120)
    side = 0.88 * 120
    np.testing.assert_allclose(face.box, [80 - side / 2, 60 - side / 2, 80 + side / 2, 60 + side / 2])
    ours = np.asarray(norm_crop(photo, face.landmarks, 112)).astype(float)
    x0, y0 = 80 - side / 2, 60 - side / 2
    ref = np.asarray(Image.fromarray(photo).resize((112, 112), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side)))
    assert np.abs(ours - ref).mean() < 2.0


def _benchmark(tmp_path, astronaut):
    """Four photos of two 'people' and four pairs, one of the photos a tight small crop, one with no face."""
    photo, tight, _ = astronaut
    src = tmp_path / "photos"
    for name, image in (("a/a_0001.jpg", photo), ("a/a_0002.png", tight),
                        ("b/b_0001.jpg", np.asarray(Image.fromarray(photo).transpose(Image.FLIP_LEFT_RIGHT))),
                        ("b/b_0002.png", smooth_image(7, (90, 110)))):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(src / name)
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("a/a_0001.jpg a/a_0002.png 1\nb/b_0001.jpg b/b_0002.png 1\n"
                     "a/a_0001.jpg b/b_0001.jpg 0\na/a_0002.png b/b_0002.png 0\n")
    return src, pairs


def _report(out) -> dict[str, tuple[str, str]]:
    with open(out / "align_report.csv", newline="") as f:
        return {r["source"]: (r["problem"], r["detail"]) for r in csv.DictReader(f)}


def test_fallback_keeps_every_photo_and_pairs2bin_every_pair(tmp_path, astronaut, capsys):
    src, pairs = _benchmark(tmp_path, astronaut)
    plain = tmp_path / "plain"
    assert align_main([str(src), str(plain), "--no-progress"]) == 0
    assert {k: v[0] for k, v in _report(plain).items()} == {"a/a_0002.png": "no_face", "b/b_0002.png": "no_face"}
    assert pairs_to_bin(str(pairs), str(plain), str(tmp_path / "plain.bin"))["skipped_pairs"] == 3
    capsys.readouterr()

    # the same folder again with --fallback: the photos reported without a face are tried again
    assert align_main([str(src), str(plain), "--no-progress", "--fallback"]) == 0
    printed = capsys.readouterr().out
    assert ("2 photos without a detected face kept by --fallback (1 from the detector's later stages forced, "
            "1 as the centre crop)") in printed, printed
    report = _report(plain)
    assert report["a/a_0002.png"][0] == FORCED and "output net probability" in report["a/a_0002.png"][1]
    assert report["b/b_0002.png"][0] == CENTRE and "centre crop" in report["b/b_0002.png"][1]
    with open(plain / "faces.csv", newline="") as f:
        rows = {r["source"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == ["a/a_0001.jpg", "a/a_0002.png", "b/b_0001.jpg", "b/b_0002.png"]
    assert rows["b/b_0002.png"]["score"] == "" and float(rows["a/a_0002.png"]["score"]) >= FORCED_MIN_SCORE
    out = pairs_to_bin(str(pairs), str(plain), str(tmp_path / "all.bin"))
    assert out == {"pairs": 4, "positives": 2, "skipped_pairs": 0}
    with open(tmp_path / "all.bin", "rb") as f:
        bins, issame = pickle.load(f)
    assert len(bins) == 8 and list(issame) == [True, True, False, False]
    # the centre crop is the middle of the photo, resized: the no-face photo's face equals it
    face = np.asarray(Image.open(plain / "b/b_0002.png")).astype(float)
    side = 0.88 * 90
    box = (55 - side / 2, 45 - side / 2, 55 + side / 2, 45 + side / 2)  # 110 wide, 90 high
    ref = np.asarray(Image.fromarray(smooth_image(7, (90, 110))).resize((112, 112), Image.BILINEAR, box=box))
    assert np.abs(face - ref).mean() < 2.0
