"""insightface's `norm_crop` rule written out as the independent oracle of the alignment tests: scikit-image's
`SimilarityTransform` estimated onto `arcface_dst`, then OpenCV's `warpAffine` with a zero border."""

from __future__ import annotations

import cv2
import numpy as np
from skimage.transform import SimilarityTransform

ARCFACE_DST = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                        [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)


def insightface_crop(photo: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    if hasattr(SimilarityTransform, "from_estimate"):
        tform = SimilarityTransform.from_estimate(landmarks, ARCFACE_DST)
    else:
        tform = SimilarityTransform()
        tform.estimate(landmarks, ARCFACE_DST)
    return cv2.warpAffine(photo, tform.params[0:2, :], (112, 112), borderValue=0.0)
