"""insightface's `norm_crop` rule written out as the independent oracle of the alignment tests: scikit-image's
`SimilarityTransform` estimated onto `arcface_dst`, then OpenCV's `warpAffine` with a zero border."""

from __future__ import annotations

import cv2
import numpy as np
from skimage.transform import SimilarityTransform

# insightface's python-package/insightface/utils/face_align.py `arcface_dst`, typed in from its source
ARCFACE_DST = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                        [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)
# skimage.data.astronaut(): five landmarks (eyes, nose tip, mouth corners) of her face
ASTRONAUT_LANDMARKS = np.array([[205.1, 101.6], [247.5, 103.7], [224.8, 128.8], [201.8, 139.3], [245.4, 141.9]])


def insightface_matrix(landmarks: np.ndarray) -> np.ndarray:
    """insightface's estimate_norm: the [2, 3] similarity skimage estimates from the landmarks to arcface_dst."""
    if hasattr(SimilarityTransform, "from_estimate"):
        tform = SimilarityTransform.from_estimate(landmarks, ARCFACE_DST)
    else:
        tform = SimilarityTransform()
        tform.estimate(landmarks, ARCFACE_DST)
    return tform.params[0:2, :]


def insightface_crop(photo: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    return cv2.warpAffine(photo, insightface_matrix(landmarks), (112, 112), borderValue=0.0)


#: whose arithmetic the installed cv2.warpAffine follows: OpenCV 5.0 replaced the 8-bit bilinear kernel that every
#: release up to 4.x used (1/32 px fixed point) by float32 fused multiply-adds
OPENCV_KERNEL = 5 if int(cv2.__version__.split(".")[0]) >= 5 else 4


def assert_opencv_crop(ours: np.ndarray, ref: np.ndarray, kernel: int = 4, same_matrix: bool = True) -> None:
    """`ours`, warped with OpenCV `kernel`'s arithmetic, against the installed OpenCV's crop `ref`.

    Same kernel and matrix: the issue's bar (mean |difference| <= 0.05 grey level, none over 1) and nearly every
    pixel equal: bit-identical where OpenCV 5's kernel has fused multiply-adds (AVX2, AVX-512, NEON); without
    them it rounds twice and a rare pixel on a tie moves by one. The other kernel, or a matrix from landmarks
    rounded as faces.csv stores them (OpenCV 4 steps its map in 1/32 px: a 1e-4 change moves an edge pixel):
    mean <= 0.2, none over 4 (on 324 warps of LFW photos the two OpenCVs differ by 0.01 on average, 0.11 on the
    worst crop, 4 at most; 0.13 on a sharp astronaut crop). Pillow's truncating warp, this package's before, was
    0.45 darker and fails both."""
    diff = np.abs(ours.astype(int) - ref.astype(int))
    assert ours.shape == ref.shape
    if kernel == OPENCV_KERNEL and same_matrix:
        assert diff.mean() <= 0.05 and diff.max() <= 1, (diff.mean(), diff.max())
        assert (diff != 0).mean() <= 1e-3, (diff != 0).mean()
    else:
        assert diff.mean() <= 0.2 and diff.max() <= 4, (diff.mean(), diff.max())
