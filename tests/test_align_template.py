"""norm_crop against insightface's rule written out independently: scikit-image's SimilarityTransform for the
matrix, OpenCV's warpAffine (bilinear, border 0) for the pixels."""

from __future__ import annotations

import numpy as np
import pytest

from elasticface.align.template import estimate_norm, norm_crop

skimage = pytest.importorskip("skimage")
cv2 = pytest.importorskip("cv2")
from skimage import data as skdata  # noqa: E402
from helpers.insightface_align import ARCFACE_DST, insightface_crop, insightface_matrix  # noqa: E402

# astronaut(): eyes, nose tip and mouth corners read off the photo by eye (only a plausible face is needed)
ASTRONAUT_POINTS = np.array([[181.0, 105.0], [224.0, 102.0], [206.0, 126.0], [186.0, 151.0], [222.0, 149.0]])


def landmark_cases() -> list[np.ndarray]:
    """The astronaut's points, moved by random similarities (some reaching past the photo's edge) plus noise."""
    rng = np.random.default_rng(0)
    cases = [ASTRONAUT_POINTS]
    centre = ASTRONAUT_POINTS.mean(0)
    for _ in range(8):
        angle, scale = rng.uniform(-0.6, 0.6), rng.uniform(0.5, 2.5)
        rot = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        shift = rng.uniform(-200, 200, 2)
        cases.append((ASTRONAUT_POINTS - centre) @ rot.T + centre + shift + rng.normal(0, 1.5, (5, 2)))
    return cases


@pytest.mark.parametrize("case", range(9))
def test_transform_and_pixels_match_insightface_rule(case):
    landmarks = landmark_cases()[case]
    image = skdata.astronaut()
    np.testing.assert_allclose(estimate_norm(landmarks), insightface_matrix(landmarks), atol=1e-4)
    ours = np.asarray(norm_crop(image, landmarks)).astype(int)
    ref = insightface_crop(image, landmarks).astype(int)
    assert ours.shape == ref.shape == (112, 112, 3)
    assert np.abs(ours - ref).max() <= 1


def test_grey_image_stays_grey_and_matches():
    image = skdata.astronaut().mean(2).astype(np.uint8)
    ours = np.asarray(norm_crop(image, ASTRONAUT_POINTS)).astype(int)
    assert ours.shape == (112, 112)
    assert np.abs(ours - insightface_crop(image, ASTRONAUT_POINTS).astype(int)).max() <= 1


def test_landmarks_land_on_the_template():
    matrix = estimate_norm(ASTRONAUT_POINTS)
    moved = ASTRONAUT_POINTS @ matrix[:, :2].T + matrix[:, 2]
    assert np.abs(moved - ARCFACE_DST).max() < 3.0  # a similarity cannot fit 5 hand-read points exactly


@pytest.mark.parametrize("bad", [np.zeros((4, 2)), np.full((5, 2), np.nan)])
def test_bad_landmarks_are_named(bad):
    with pytest.raises(ValueError, match="5 finite"):
        estimate_norm(bad)
