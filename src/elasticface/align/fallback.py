"""A face for a photo known to hold one where the detector found none: a benchmark set must keep every pair.

Dropping such a photo drops every pair that uses it, and the set is no longer its protocol's. insightface's
dataset builders (src/align/align_*.py) keep every photo instead: where the cascade finds nothing they run its
refine and output nets on a given box with their thresholds at zero (`detect_face_force`) and take those
landmarks when the output net's probability is at least 0.3; below that they cut a fixed centre crop (6% of the
photo off each side) and resize it. The same two steps here, on the whole photo (`MTCNNDetector.force`); the
centre crop is the central square (88% of the shorter side), expressed as the landmarks at which the template's
points sit in it, so it is warped like any face and its row in faces.csv works as a landmark file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elasticface.align.detector import Face, MTCNNDetector
from elasticface.align.template import arcface_template

FORCED_MIN_SCORE = 0.3  # insightface's floor for a forced detection (align_megaface.py)
CENTRE_MARGIN = 0.06  # insightface's centre crop: this fraction of the photo off each side
FORCED, CENTRE = "fallback_forced", "fallback_centre"  # how a photo was kept, as align_report.csv names it


@dataclass
class Fallback:
    how: str  # FORCED or CENTRE
    face: Face  # score nan for the centre crop

    def detail(self) -> str:
        if self.how == FORCED:
            return (f"no face found; kept by --fallback: the detector's later stages forced on the whole photo "
                    f"(output net probability {self.face.score:.3f})")
        return (f"no face found; kept by --fallback: the centre crop (the forced later stages gave probability "
                f"below {FORCED_MIN_SCORE})")


def centre_face(width: int, height: int, image_size: int = 112) -> Face:
    """The central square of the photo (CENTRE_MARGIN off the shorter side's ends) as a Face whose landmarks are
    where the template's points fall in it: aligning them warps that square onto the output."""
    side = (1.0 - 2.0 * CENTRE_MARGIN) * min(width, height)
    x0, y0 = (width - side) / 2.0, (height - side) / 2.0
    landmarks = arcface_template(image_size) * (side / image_size) + np.array([x0, y0])
    return Face(np.array([x0, y0, x0 + side, y0 + side]), float("nan"), landmarks)


def fallback_face(detector: MTCNNDetector, photo: np.ndarray, image_size: int = 112) -> Fallback:
    """The forced detection when its probability reaches FORCED_MIN_SCORE, else the centre crop."""
    forced = detector.force(photo)
    if forced.score >= FORCED_MIN_SCORE:
        return Fallback(FORCED, forced)
    return Fallback(CENTRE, centre_face(photo.shape[1], photo.shape[0], image_size))
