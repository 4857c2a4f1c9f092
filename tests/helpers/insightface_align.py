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
