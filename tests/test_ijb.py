"""IJB-B/C: alignment (Umeyama + PIL warp), template aggregation, and the TAR@FAR table against
insightface's `eval_ijbc.py` rule written out here with sklearn."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from PIL import Image

from elasticface.align.template import align_face, arcface_template, umeyama, warp_affine
from elasticface.eval.ijb import DEFAULT_FARS, evaluate_ijb, load_ijb_meta
from elasticface.metrics.roc import roc_curve, tar_at_far, tar_at_fars
from helpers.ijb_files import ColourEmbedder, reference_templates
from helpers.ijb_files import apply_similarity as _apply, make_ijb as _make_ijb, similarity as _similarity
from helpers.roc_oracle import insightface_tar_row


def test_template_has_the_x_plus_8_shift():
    t = arcface_template(112)
    np.testing.assert_allclose(t[0], [38.2946, 51.6963])
    np.testing.assert_allclose(t[:, 0].mean(), 56.0, atol=0.1)  # centred in 112 px


@pytest.mark.parametrize("seed", range(4))
def test_umeyama_recovers_known_similarity(seed):
    rng = np.random.default_rng(seed)
    m = _similarity(rng.uniform(0.3, 3), rng.uniform(-np.pi, np.pi), *rng.uniform(-50, 50, 2))
    src = rng.uniform(0, 200, (5, 2))
    np.testing.assert_allclose(umeyama(src, _apply(m, src)), m, atol=1e-9)
    # with noise, the estimate is the least-squares similarity: compare with the linear solve for
    # x' = a x - b y + tx, y' = b x + a y + ty
    noisy = _apply(m, src) + rng.normal(0, 0.5, src.shape)
    rows = [r for x, y in src for r in ([x, -y, 1, 0], [y, x, 0, 1])]
    a, b, tx, ty = np.linalg.lstsq(np.array(rows), noisy.ravel(), rcond=None)[0]
    np.testing.assert_allclose(umeyama(src, noisy)[:2], [[a, -b, tx], [b, a, ty]], atol=1e-8)


def _blobs(size, centers, sigma=2.5):
    yy, xx = np.mgrid[0:size[1], 0:size[0]].astype(np.float64)
    img = np.zeros((size[1], size[0]))
    for cx, cy in centers:
        img += np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * sigma**2))
    return np.clip(img * 255, 0, 255)


def _reference_warp(src, matrix, size):
    """cv2.warpAffine semantics in numpy: output pixel (x, y) samples the source at A^-1 ((x, y) - t)."""
    a_inv = np.linalg.inv(matrix[:2, :2])
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    pts = np.stack([xx.ravel(), yy.ravel()], 1) - matrix[:2, 2]
    sx, sy = (pts @ a_inv.T).T
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    fx, fy = sx - x0, sy - y0
    h, w = src.shape

    def at(y, x):
        ok = (x >= 0) & (x < w) & (y >= 0) & (y < h)
        return np.where(ok, src[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)], 0.0)

    out = (at(y0, x0) * (1 - fx) * (1 - fy) + at(y0, x0 + 1) * fx * (1 - fy)
           + at(y0 + 1, x0) * (1 - fx) * fy + at(y0 + 1, x0 + 1) * fx * fy)
    return out.reshape(size, size)


def test_alignment_puts_landmarks_on_the_template():
    template = arcface_template(112)
    # a face 1.6x larger than the template, rotated 20 degrees, somewhere in a 250x230 image
    to_image = _similarity(1.6, math.radians(20), 60, 30)
    landmarks = _apply(to_image, template)
    src = _blobs((250, 230), landmarks)
    image = Image.fromarray(src.astype(np.uint8)).convert("RGB")
    aligned = np.asarray(align_face(image, landmarks, 112), dtype=np.float64)[:, :, 0]
    assert aligned.shape == (112, 112)
    yy, xx = np.mgrid[0:112, 0:112]
    for cx, cy in template:
        win = (np.abs(xx - cx) <= 5) & (np.abs(yy - cy) <= 5)
        w = aligned * win
        centroid = np.array([(w * xx).sum(), (w * yy).sum()]) / w.sum()
        np.testing.assert_allclose(centroid, [cx, cy], atol=0.25)
    # and the warp follows cv2.warpAffine's pixel-centre convention
    matrix = umeyama(landmarks, template)
    ref = _reference_warp(src.astype(np.uint8).astype(np.float64), matrix, 112)
    got = np.asarray(warp_affine(Image.fromarray(src.astype(np.uint8)), matrix[:2], 112), dtype=np.float64)
    assert np.abs(got - ref).max() <= 2.0


def _scores(num_impostors, num_genuine, decimals, seed):
    """Cosine-like scores: few genuine pairs, many impostors, heavy ties when rounded."""
    rng = np.random.default_rng(seed)
    labels = np.zeros(num_impostors + num_genuine, dtype=bool)
    labels[rng.choice(labels.size, num_genuine, replace=False)] = True
    scores = np.where(labels, rng.normal(0.55, 0.15, labels.size), rng.normal(0.0, 0.1, labels.size))
    return (np.round(scores, decimals) if decimals is not None else scores), labels


@pytest.mark.parametrize("num_impostors,num_genuine,decimals,seed", [
    (1_500_000, 2_000, 3, 0),  # smallest non-zero FPR < 1e-6, thousands of tied scores
    (300_000, 500, 4, 1),      # FAR 1e-6 lies below the smallest non-zero FPR (3.3e-6)
    (20_000, 60, None, 2),     # no ties at all
    (5_000, 300, 2, 3),        # coarse scores: long vertical and diagonal runs of ROC points
])
def test_tar_table_equals_insightface(num_impostors, num_genuine, decimals, seed):
    scores, labels = _scores(num_impostors, num_genuine, decimals, seed)
    fpr, tpr, _ = roc_curve(scores, labels)
    got = tar_at_fars(fpr, tpr, DEFAULT_FARS)
    assert list(got) == ["tar_at_far_1e-6", "tar_at_far_1e-5", "tar_at_far_1e-4", "tar_at_far_1e-3",
                         "tar_at_far_1e-2", "tar_at_far_1e-1"]
    assert list(got.values()) == insightface_tar_row(scores, labels, DEFAULT_FARS)


def test_the_rules_that_insightface_does_not_use_give_other_numbers():
    """The table test above can fail: keeping every ROC point, or taking the lowest TPR among equally
    near points (which reads 0 below the smallest non-zero FPR), changes cells."""
    # ties of one genuine and one impostor make evenly spaced diagonal runs that drop_intermediate removes
    scores = np.r_[np.repeat(np.arange(10.0, 0.0, -1.0), 2), np.full(5, 20.0), -np.arange(1.0, 1001.0)]
    labels = np.r_[np.tile([True, False], 10), np.ones(5, bool), np.zeros(1000, bool)]
    fars = (1e-4, 5e-3, 7e-3)
    want = insightface_tar_row(scores, labels, fars)
    fpr, tpr, _ = roc_curve(scores, labels)
    assert list(tar_at_fars(fpr, tpr, fars).values()) == want
    full_fpr, full_tpr, _ = roc_curve(scores, labels, drop_intermediate=False)
    assert [tar_at_far(full_fpr, full_tpr, f) for f in fars] != want
    lowest = [float(tpr[np.argmin(np.abs(fpr - f))]) for f in fars]
    assert lowest[0] == 0.0 < want[0] and lowest != want


# -- a synthetic IJB-like directory -----------------------------------------------------------------------

def _reference_ijb(base, target, model):
    """Plain loops over images, media and templates (helpers.ijb_files.reference_templates), then the pair list."""
    templates = reference_templates(base, target, model)
    scores, labels = [], []
    for line in open(os.path.join(base, "meta", f"{target.lower()}_template_pair_label.txt")):
        a, b, y = map(int, line.split())
        scores.append(float(templates[a] @ templates[b]))
        labels.append(bool(y))
    return np.array(scores), np.array(labels)


def test_evaluate_ijb_on_synthetic_directory(tmp_path):
    base = _make_ijb(str(tmp_path))
    model = ColourEmbedder()
    fars = (1e-2, 1e-1)
    result = evaluate_ijb(model, str(tmp_path), "IJBC", batch_size=4, device="cpu", fars=fars)
    ref_scores, ref_labels = _reference_ijb(base, "IJBC", model)
    np.testing.assert_allclose(result["scores"], ref_scores, atol=1e-5)
    np.testing.assert_array_equal(result["labels"], ref_labels)
    assert list(result["tar"].values()) == insightface_tar_row(result["scores"], ref_labels, fars)
    assert result["num_templates"] == 8 and result["num_pairs"] == 28
    # the coloured identities are separable: genuine pairs score higher than impostors on average
    assert result["scores"][ref_labels].mean() > result["scores"][~ref_labels].mean()
    # root may also be the target folder itself
    assert load_ijb_meta(base, "IJBC").names == load_ijb_meta(str(tmp_path), "IJBC").names


def test_missing_meta_gives_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="meta"):
        load_ijb_meta(str(tmp_path), "IJBB")
