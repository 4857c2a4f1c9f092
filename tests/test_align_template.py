"""norm_crop against insightface's rule written out independently: scikit-image's SimilarityTransform for the
matrix, OpenCV's warpAffine (bilinear, border 0) for the pixels."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from elasticface.align.template import estimate_norm, norm_crop, warp_affine

skimage = pytest.importorskip("skimage")
cv2 = pytest.importorskip("cv2")
from skimage import data as skdata  # noqa: E402
from helpers.insightface_align import (  # noqa: E402
    ARCFACE_DST, OPENCV_KERNEL, assert_opencv_crop, insightface_crop, insightface_matrix)

# astronaut(): eyes, nose tip and mouth corners read off the photo by eye (only a plausible face is needed)
ASTRONAUT_POINTS = np.array([[181.0, 105.0], [224.0, 102.0], [206.0, 126.0], [186.0, 151.0], [222.0, 149.0]])


def landmark_cases() -> list[np.ndarray]:
    """The astronaut's points moved by random similarities plus noise: faces from 0.2x to 5x the photo's own
    (crops scaled up and down), turned by up to 90 degrees, some reaching past the photo's edge."""
    rng = np.random.default_rng(0)
    cases = [ASTRONAUT_POINTS]
    centre = ASTRONAUT_POINTS.mean(0)
    for _ in range(15):
        angle, scale = rng.uniform(-1.6, 1.6), np.exp(rng.uniform(np.log(0.2), np.log(5.0)))
        rot = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        shift = rng.uniform(-200, 200, 2)
        cases.append((ASTRONAUT_POINTS - centre) @ rot.T + centre + shift + rng.normal(0, 1.5, (5, 2)))
    return cases


@pytest.mark.parametrize("grey", [False, True], ids=["rgb", "grey"])
@pytest.mark.parametrize("case", range(16))
def test_transform_and_pixels_match_insightface_rule(case, grey):
    landmarks = landmark_cases()[case]
    image = skdata.astronaut()
    if grey:
        image = image.mean(2).astype(np.uint8)
    np.testing.assert_allclose(estimate_norm(landmarks), insightface_matrix(landmarks), atol=1e-4)
    ours = np.asarray(norm_crop(image, landmarks, opencv=OPENCV_KERNEL))
    assert ours.shape == ((112, 112) if grey else (112, 112, 3))
    assert_opencv_crop(ours, insightface_crop(image, landmarks), OPENCV_KERNEL)
    assert_opencv_crop(np.asarray(norm_crop(image, landmarks)), insightface_crop(image, landmarks))  # the default


@pytest.mark.parametrize("size", [112, (96, 112), (40, 30)])
def test_warp_matches_opencv_on_any_matrix(size):
    """Not only similarities: shears, flips and unequal scales, a PIL image in (RGB, RGBA, L) and the same mode
    out, output sizes other than the square crop."""
    rng = np.random.default_rng(1)
    photo = skdata.astronaut()
    for mode in ("RGB", "RGBA", "L"):
        image = Image.fromarray(photo).convert(mode)
        for _ in range(4):
            matrix = np.c_[rng.uniform(-1.5, 1.5, (2, 2)), rng.uniform(-300, 300, 2)]
            out = warp_affine(image, matrix, size, opencv=OPENCV_KERNEL)
            assert out.mode == mode and out.size == ((size, size) if isinstance(size, int) else size)
            ref = cv2.warpAffine(np.asarray(image), matrix, out.size, flags=cv2.INTER_LINEAR,
                                 borderMode=cv2.BORDER_CONSTANT, borderValue=0)
            assert_opencv_crop(np.asarray(out), ref, OPENCV_KERNEL)


def test_crop_wholly_outside_the_photo_is_black():
    image = skdata.astronaut()
    out = np.asarray(warp_affine(Image.fromarray(image), np.array([[1.0, 0, -2000], [0, 1.0, 5000]]), 112))
    assert not out.any()


def test_warp_refuses_what_it_cannot_blend():
    with pytest.raises(ValueError, match=r"opencv=3; expected one of \(4, 5\)"):
        warp_affine(Image.new("L", (10, 10)), np.eye(3)[:2], 4, opencv=3)
    with pytest.raises(ValueError, match="mode I;16"):
        warp_affine(Image.new("I;16", (10, 10)), np.eye(3)[:2], 4)
    with pytest.raises(ValueError, match="uint8"):
        norm_crop(np.zeros((50, 50, 3), dtype=np.float32), ASTRONAUT_POINTS)


def test_landmarks_land_on_the_template():
    matrix = estimate_norm(ASTRONAUT_POINTS)
    moved = ASTRONAUT_POINTS @ matrix[:, :2].T + matrix[:, 2]
    assert np.abs(moved - ARCFACE_DST).max() < 3.0  # a similarity cannot fit 5 hand-read points exactly


@pytest.mark.parametrize("bad", [np.zeros((4, 2)), np.full((5, 2), np.nan)])
def test_bad_landmarks_are_named(bad):
    with pytest.raises(ValueError, match="5 finite"):
        estimate_norm(bad)
