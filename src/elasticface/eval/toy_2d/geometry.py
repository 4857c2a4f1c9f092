"""The toy example's numbers: angles between consecutive class centres and the angular spread of each class.

With C classes and 2-D embeddings the ideal layout spaces the class centres 360°/C apart (45° for 8
identities) and keeps each class's embeddings tight around its centre; this measures both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from elasticface.utils.errors import BadValue


def angles_deg(vectors: np.ndarray) -> np.ndarray:
    """Direction of each row of a [N, 2] array, in degrees in [0, 360)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[1] != 2:
        raise BadValue(f"expected 2-D vectors of shape [N, 2], got {list(vectors.shape)}")
    return np.degrees(np.arctan2(vectors[:, 1], vectors[:, 0])) % 360.0


def wrap_deg(angles: np.ndarray) -> np.ndarray:
    """Angle differences mapped to [-180, 180)."""
    return (np.asarray(angles) + 180.0) % 360.0 - 180.0


def toy_geometry(embeddings: np.ndarray, labels: np.ndarray, centres: np.ndarray,
                 identity_variation: Sequence[float] | None = None) -> dict[str, Any]:
    """Angles between consecutive class centres and the angular spread of each class.

    Centres are taken in the order they lie around the circle, so ``consecutive_gaps_deg`` always sums
    to 360°; their deviation from 360°/C says how evenly the classes share the circle. A class's spread
    is the population standard deviation of its embeddings' angles (measured relative to its centre, so
    a class straddling 0° is not split). ``overlap_fraction`` is the share of embeddings at a smaller angle
    to another class's centre than to their own: what a nearest-centre classifier would get wrong. With
    ``identity_variation`` (one factor per class) the spread is also averaged per variation level: the toy
    example's low- and high-variation identities.
    """
    labels = np.asarray(labels)
    centre_angles = angles_deg(centres)
    num_classes = len(centre_angles)
    if num_classes < 2:
        raise BadValue(f"the toy example needs at least 2 class centres (data.train_dataset.num_identities), "
                         f"got {num_classes}")
    if labels.min(initial=0) < 0 or labels.max(initial=0) >= num_classes:
        raise BadValue(f"labels must lie in [0, {num_classes}), the number of centres")
    order = np.argsort(centre_angles)
    sorted_angles = centre_angles[order]
    gaps = np.diff(np.append(sorted_angles, sorted_angles[0] + 360.0))
    ideal = 360.0 / num_classes
    deviations = wrap_deg(angles_deg(embeddings) - centre_angles[labels])
    class_std = np.array([deviations[labels == k].std() if np.any(labels == k) else np.nan for k in range(num_classes)])
    class_offset = np.array(
        [deviations[labels == k].mean() if np.any(labels == k) else np.nan for k in range(num_classes)]
    )
    # overlap: an embedding at a smaller angle to another class's centre than to its own
    to_centres = np.abs(wrap_deg(angles_deg(embeddings)[:, None] - centre_angles[None, :]))
    own = to_centres[np.arange(len(labels)), labels]
    to_centres[np.arange(len(labels)), labels] = np.inf
    overlap = float(np.mean(to_centres.min(axis=1) < own)) if len(labels) else float("nan")
    result: dict[str, Any] = {
        "num_classes": num_classes,
        "num_embeddings": int(len(labels)),
        "ideal_gap_deg": ideal,
        "centre_angles_deg": centre_angles.tolist(),
        "classes_around_circle": order.tolist(),
        "consecutive_gaps_deg": gaps.tolist(),
        "gap_min_deg": float(gaps.min()),
        "gap_max_deg": float(gaps.max()),
        "gap_mean_abs_error_deg": float(np.abs(gaps - ideal).mean()),
        "class_std_deg": class_std.tolist(),
        "class_offset_deg": class_offset.tolist(),
        "mean_class_std_deg": float(np.nanmean(class_std)),
        "overlap_fraction": overlap,
    }
    if identity_variation is not None:
        variation = np.asarray(identity_variation, dtype=np.float64)
        if len(variation) != num_classes:
            raise BadValue(f"identity_variation has {len(variation)} factors for {num_classes} classes")
        result["identity_variation"] = variation.tolist()
        result["mean_class_std_deg_by_variation"] = {
            f"{level:g}": float(np.nanmean(class_std[variation == level])) for level in np.unique(variation)
        }
    return result
