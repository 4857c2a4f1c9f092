"""The TAR@FAR table row of insightface's eval_ijbc.py, written with sklearn: the oracle of the project's ROC rule."""

from __future__ import annotations

import numpy as np


def insightface_tar_row(scores, labels, fars):
    """eval_ijbc.py's table row: sklearn's ROC with its defaults, arrays flipped, then for every FAR the
    first (distance, index) minimum, i.e. the nearest FPR and, among equally near points, the highest TPR."""
    from sklearn.metrics import roc_curve as sk_roc

    fpr, tpr, _ = sk_roc(labels, scores)
    fpr, tpr = fpr[::-1], tpr[::-1]
    row = []
    for far in fars:
        _, i = min(zip(np.abs(fpr - far), range(len(fpr))))
        row.append(float(tpr[i]))
    return row
