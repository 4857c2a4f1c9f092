"""ROC of similarity scores, and TAR read off it at a target FAR the way published IJB-B/C tables are.

The IJB-B/C TAR@FAR tables of the literature come from insightface's
`recognition/arcface_torch/eval_ijbc.py`. Its rule, which `roc_curve` + `tar_at_far` reproduce exactly:

- the ROC is sklearn's `roc_curve(labels, scores)` with its defaults: one point per distinct score
  (accept `score >= threshold`), preceded by (0, 0), and `drop_intermediate=True`, which drops a point
  whose false- and true-positive counts both lie exactly halfway between its neighbours' (such a point
  is on the straight line between them, so the curve looks the same, but it can no longer be picked);
- the TAR at a target FAR is the TPR of the ROC point whose FPR is nearest to the target; among equally
  near points the last one, i.e. the highest TPR (insightface flips the arrays and takes
  `min((distance, index))`). So a FAR below the smallest non-zero FPR reads the highest TPR reached
  with no false accept, not the TPR 0 of the (0, 0) start.

Numbers computed this way are comparable with published IJB-B/C tables. sklearn is not needed: the
curve is computed here (tests/test_ijb.py checks it against sklearn point for point).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from torch import Tensor


def as_numpy(x: Any, dtype: Any = np.float64) -> np.ndarray:
    """Tensor, list or array -> numpy array of `dtype` (floating tensors through float64)."""
    if isinstance(x, Tensor):
        x = x.detach().cpu()
        x = x.double().numpy() if x.is_floating_point() else x.numpy()
    return np.asarray(x, dtype=dtype)


def far_key(far: float, metric: str = "tar_at_far") -> str:
    """Metric name for a target rate: 1e-3 -> 'tar_at_far_1e-3'; IJB 1:N's FPIR: (1e-2, 'tpir_at_fpir') ->
    'tpir_at_fpir_1e-2'."""
    mantissa, exponent = f"{far:.0e}".split("e")
    return f"{metric}_{mantissa}e{int(exponent)}"


def roc_curve(scores: Any, labels: Any, drop_intermediate: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC of similarity scores (larger = more similar): (fpr, tpr, thresholds), FPR ascending.

    Equal to sklearn's `roc_curve(labels, scores, drop_intermediate=...)`: a point per distinct score,
    accepting `score >= threshold`, preceded by (0, 0) at threshold +inf. A label set without genuine
    (or without impostor) pairs gives TPR (or FPR) 0 where sklearn gives NaN.
    """
    scores = as_numpy(scores).reshape(-1)
    labels = as_numpy(labels, dtype=bool).reshape(-1)
    tps, fps, thresholds = _roc_counts(scores, labels, drop_intermediate)
    tpr = np.r_[0.0, tps / max(int(labels.sum()), 1)]
    fpr = np.r_[0.0, fps / max(int((~labels).sum()), 1)]
    return fpr, tpr, np.r_[np.inf, thresholds]


def _roc_counts(scores: np.ndarray, labels: np.ndarray, drop_intermediate: bool) -> tuple[np.ndarray, ...]:
    """(true-positive counts, false-positive counts, thresholds) at each distinct score, highest first."""
    if scores.shape != labels.shape:
        raise ValueError(f"roc_curve: {scores.shape[0]} scores for {labels.shape[0]} labels")
    if not np.isfinite(scores).all():
        raise ValueError(f"roc_curve: {int((~np.isfinite(scores)).sum())} of {scores.shape[0]} scores are not finite")
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    last_of_value = np.r_[np.flatnonzero(np.diff(s)), s.shape[0] - 1]
    tps = np.cumsum(y)[last_of_value]
    fps = (last_of_value + 1) - tps
    thresholds = s[last_of_value]
    if drop_intermediate and tps.shape[0] > 2:
        keep = np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True]
        tps, fps, thresholds = tps[keep], fps[keep], thresholds[keep]
    return tps, fps, thresholds


def impostors_to_keep(num_impostors: int, fars: Sequence[float]) -> int:
    """How many of the highest impostor scores `tar_at_fars_top` needs to read TAR at `fars` exactly: more than
    twice the largest FAR's share, so that every ROC point the rule could pick lies among them."""
    return min(int(num_impostors), int(2 * max(fars) * num_impostors) + 1)


def tar_at_fars_top(genuine: Any, top_impostors: Any, num_impostors: int,
                    fars: Sequence[float]) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """`tar_at_fars(*roc_curve(all scores))` from every genuine score and only the highest impostor scores.

    `top_impostors` must hold every impostor score >= its own minimum t (ties included), at least
    `impostors_to_keep(num_impostors, fars)` of them, out of `num_impostors`: 3.5 billion (probe, distractor)
    scores need not exist at once. The ROC points above t are then exactly those of the full curve (their
    counts, and whether drop_intermediate keeps them); the point at t has exact counts, and t's FPR is more than
    twice the largest target, so no point at or below t is nearer to a target than the (0, 0) start. Returns
    ({key: TAR}, fpr, tpr) with the curve's known part (for plots)."""
    genuine = as_numpy(genuine).reshape(-1)
    num_genuine = genuine.shape[0]
    top = as_numpy(top_impostors).reshape(-1)
    num_impostors = int(num_impostors)
    if top.shape[0] > num_impostors:
        raise ValueError(f"tar_at_fars_top: {top.shape[0]} impostor scores kept out of {num_impostors}")
    if top.shape[0] < impostors_to_keep(num_impostors, fars):
        raise ValueError(f"tar_at_fars_top: {top.shape[0]} impostor scores kept; FAR {max(fars):g} of "
                         f"{num_impostors} needs {impostors_to_keep(num_impostors, fars)}")
    if top.shape[0] < num_impostors:  # genuine scores below t would add points whose impostor counts are unknown
        genuine = genuine[genuine >= top.min()]
    labels = np.r_[np.ones(genuine.shape[0], dtype=bool), np.zeros(top.shape[0], dtype=bool)]
    tps, fps, _ = _roc_counts(np.r_[genuine, top], labels, drop_intermediate=True)
    fpr = np.r_[0.0, fps / max(num_impostors, 1)]
    tpr = np.r_[0.0, tps / max(num_genuine, 1)]
    return tar_at_fars(fpr, tpr, fars), fpr, tpr


def tar_at_far(fpr: np.ndarray, tpr: np.ndarray, far: float) -> float:
    """TPR of the ROC point whose FPR is nearest to `far`; on ties the last point (highest TPR)."""
    distance = np.abs(np.asarray(fpr, dtype=np.float64) - far)
    return float(tpr[np.flatnonzero(distance == distance.min())[-1]])


def tar_at_fars(fpr: np.ndarray, tpr: np.ndarray, fars: Sequence[float]) -> dict[str, float]:
    """{'tar_at_far_1e-4': TAR, ...}: one row of an IJB-B/C table, from the `fpr`, `tpr` of `roc_curve`."""
    return {far_key(f): tar_at_far(fpr, tpr, f) for f in fars}
