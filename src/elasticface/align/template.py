"""insightface's `norm_crop` rule, in one place: the 5-point template, the similarity transform to it and the warp.

The transform is the least-squares similarity of Umeyama (1991), which is what scikit-image's
`SimilarityTransform.estimate` computes and insightface's `face_align.estimate_norm` calls; the warp is
`cv2.warpAffine(img, M, (112, 112), borderValue=0)` (bilinear, pixel centres at integer coordinates, zero
outside the photo), done with PIL so that OpenCV is not a dependency. IJB evaluation, `elasticface-align`
and `elasticface-compare` all align through :func:`norm_crop`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

# ArcFace's 5 points (left eye, right eye, nose tip, left and right mouth corner) for the older 96x112 crop.
ARCFACE_TEMPLATE_96X112 = np.array(
    [[30.2946, 51.6963], [65.5318, 51.5014], [48.0252, 71.7366], [33.5493, 92.3655], [62.7299, 92.2041]],
    dtype=np.float64,
)


def arcface_template(image_size: int = 112) -> np.ndarray:
    """The 5 target points (insightface's `arcface_dst`) for a square `image_size` crop: the 96x112 points with
    x + 8 for 112, scaled for other sizes. Building a 112-wide crop without the + 8 puts the face 8 px off."""
    return (ARCFACE_TEMPLATE_96X112 + np.array([8.0, 0.0])) * (image_size / 112.0)


def umeyama(src: np.ndarray, dst: np.ndarray, estimate_scale: bool = True) -> np.ndarray:
    """Least-squares similarity transform (3x3, homogeneous) mapping points `src` [N, d] onto `dst` [N, d]
    (Umeyama 1991: rotation from the SVD of the cross-covariance, reflection excluded)."""
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2:
        raise ValueError(f"umeyama: src {src.shape} and dst {dst.shape} must both be [N, d]")
    n, d = src.shape
    mu_src, mu_dst = src.mean(0), dst.mean(0)
    src_c, dst_c = src - mu_src, dst - mu_dst
    cov = dst_c.T @ src_c / n
    u, s, vt = np.linalg.svd(cov)
    sign = np.ones(d)
    if np.linalg.det(cov) < 0:
        sign[-1] = -1.0
    rank = np.linalg.matrix_rank(cov)
    if rank == 0:
        raise ValueError("umeyama: degenerate points (all identical)")
    if rank == d - 1 and np.linalg.det(u) * np.linalg.det(vt) < 0:
        # rank-deficient: the sign of the last singular direction is free, choose a proper rotation
        rot = u @ np.diag(np.r_[np.ones(d - 1), -1.0]) @ vt
    else:
        rot = u @ np.diag(sign) @ vt
    scale = float(s @ sign / src_c.var(0).sum()) if estimate_scale else 1.0
    out = np.eye(d + 1)
    out[:d, :d] = scale * rot
    out[:d, d] = mu_dst - scale * rot @ mu_src
    return out


def estimate_norm(landmarks: np.ndarray, image_size: int = 112) -> np.ndarray:
    """The [2, 3] matrix mapping photo coordinates to the aligned crop (insightface's `estimate_norm`)."""
    points = np.asarray(landmarks, dtype=np.float64)
    if points.size != 10 or not np.isfinite(points).all():
        raise ValueError(f"expected 5 finite (x, y) landmarks, got shape {points.shape}: {points.ravel()[:10]}")
    return umeyama(points.reshape(5, 2), arcface_template(image_size))[:2]


def warp_affine(image: Image.Image, matrix: np.ndarray, size: int | tuple[int, int] = 112) -> Image.Image:
    """`cv2.warpAffine(image, matrix, size, borderValue=0)` with PIL: `matrix` [2, 3] maps source pixel coordinates
    to output pixel coordinates (pixel centres at integers); bilinear, and outside the photo is 0, so edge pixels
    blend with 0 as OpenCV's do. Returns a PIL image."""
    width, height = (size, size) if isinstance(size, int) else size
    a = np.asarray(matrix, dtype=np.float64)[:2, :2]
    t = np.asarray(matrix, dtype=np.float64)[:2, 2]
    a_inv = np.linalg.inv(a)
    # The source box the crop samples, 2 px wider. Inside the photo, PIL and OpenCV agree as they are. Reaching
    # past an edge, PIL would not blend edge pixels with the 0 outside as OpenCV does: then warp a copy of that
    # box with 2 px of zero border around the photo (PIL's crop fills outside with 0; beyond, OpenCV gives 0).
    corners = np.array([[-1, -1], [width, -1], [-1, height], [width, height]], dtype=np.float64)
    seen = (corners - t) @ a_inv.T
    lo = np.floor(seen.min(0)).astype(int) - 2
    hi = np.ceil(seen.max(0)).astype(int) + 3
    part = image
    if (lo < 0).any() or (hi > np.array(image.size)).any():
        lo, hi = np.maximum(lo, -2), np.minimum(hi, np.array(image.size) + 2)
        if (hi <= lo).any():
            return Image.new(image.mode, (width, height), 0)
        part = image.crop((int(lo[0]), int(lo[1]), int(hi[0]), int(hi[1])))
        t = t + a @ lo  # the same map, from the copy's coordinates
    # PIL evaluates the inverse map at pixel centres (x + 0.5) and its bilinear filter subtracts 0.5 again
    offset = -a_inv @ (t + 0.5) + 0.5
    data = (a_inv[0, 0], a_inv[0, 1], offset[0], a_inv[1, 0], a_inv[1, 1], offset[1])
    return part.transform((width, height), Image.AFFINE, data=data, resample=Image.BILINEAR, fillcolor=0)


def norm_crop(image: Any, landmarks: np.ndarray, image_size: int = 112) -> Image.Image:
    """The aligned `image_size` square crop of `image` (PIL image or uint8 HWC array) whose 5 landmarks [5, 2]
    land on the ArcFace template."""
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    return warp_affine(image, estimate_norm(landmarks, image_size), image_size)


def align_face(image: Any, landmarks: np.ndarray, image_size: int = 112) -> Image.Image:
    """Same as :func:`norm_crop` (the name the IJB code has always used)."""
    return norm_crop(image, landmarks, image_size)
