"""What a model must beat on the same pairs: raw pixels, eigenfaces and, for a fine-tune, the weights it starts
from, scored by the verification protocol.

All embed with the protocol's own loop (training normalisation; no flip for pixels and eigenfaces) and
score with the same 10 folds, so a model's gain over them is measured on exactly its own pairs. Eigenfaces
(Turk and Pentland, 1991) are the classic learned baseline: the principal components of grey training faces,
fitted on the training set, never on the pairs.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elasticface.data import transforms
from elasticface.data.faults import DroppedRecord
from elasticface.eval.embedding_loop import evaluate_pair_set
from elasticface.utils.errors import BadValue

EIGENFACE_COMPONENTS = 128  # principal components kept
EIGENFACE_POOL = 2  # grey faces average-pooled by this factor before the PCA (112 -> 56: 3,136 pixels)
EIGENFACE_MAX_IMAGES = 20_000  # training faces the PCA is fitted on, evenly spaced over the set


Progress = Callable[[int], None] | None  # called with each batch's number of images (utils/progress.py)


def pixel_baseline(pairs: Any, batch_size: int = 512, progress: Progress = None) -> float:
    """Verification accuracy of raw pixels as embeddings (cosine similarity), same 10-fold protocol, no flip."""
    result, _ = evaluate_pair_set(nn.Flatten(), pairs, batch_size=batch_size, flip=False, device="cpu",
                                  progress=progress)
    return result["acc"]


def grey_pooled(x: Tensor, pool: int = EIGENFACE_POOL) -> Tensor:
    """Normalised RGB faces [B, 3, H, W] -> flattened grey faces pooled by `pool` [B, H*W/pool²]."""
    grey = x.mean(1, keepdim=True)
    return F.avg_pool2d(grey, pool).flatten(1) if pool > 1 else grey.flatten(1)


class Eigenfaces(nn.Module):
    """Projection of grey pooled faces onto the training set's top principal components."""

    def __init__(self, mean: Tensor, components: Tensor, pool: int = EIGENFACE_POOL) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("components", components)  # [pixels, k], orthonormal columns
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        return (grey_pooled(x, self.pool) - self.mean) @ self.components


@torch.no_grad()
def fit_eigenfaces(train_set: Any, components: int = EIGENFACE_COMPONENTS, pool: int = EIGENFACE_POOL,
                   max_images: int = EIGENFACE_MAX_IMAGES, progress: Progress = None) -> Eigenfaces:
    """PCA of up to `max_images` training faces (items `(uint8 [3, H, W], label)`, evenly spaced), in float64."""
    n = len(train_set)
    if n < 2:
        raise BadValue(f"eigenfaces need at least 2 training images, the training set has {n}")
    step = -(-n // max_images)  # ceil: at most max_images rows
    rows = []
    for i in range(0, n, step):
        item = train_set[i]
        if isinstance(item, DroppedRecord):  # unreadable: the training set counts it, the PCA skips it
            continue
        rows.append(grey_pooled(transforms.normalize(item[0][None]), pool)[0].double())
        if progress is not None:
            progress(1)
    data = torch.stack(rows)
    mean = data.mean(0)
    covariance = (data - mean).T @ (data - mean) / (len(rows) - 1)
    _, vectors = torch.linalg.eigh(covariance)  # ascending eigenvalues
    k = min(components, vectors.shape[1])
    return Eigenfaces(mean.float(), vectors[:, -k:].flip(1).float().contiguous(), pool)


def eigenface_accuracy(eigenfaces: Eigenfaces, pairs: Any, batch_size: int = 512, progress: Progress = None) -> float:
    """Verification accuracy of fitted eigenfaces on `pairs` (cosine similarity, no flip)."""
    result, _ = evaluate_pair_set(eigenfaces, pairs, batch_size=batch_size, flip=False, device="cpu",
                                  progress=progress)
    return result["acc"]


def eigenface_baseline(train_set: Any, pairs: Any, components: int = EIGENFACE_COMPONENTS,
                       batch_size: int = 512) -> float:
    """Verification accuracy of eigenfaces fitted on `train_set`, on `pairs` (cosine similarity, no flip)."""
    return eigenface_accuracy(fit_eigenfaces(train_set, components), pairs, batch_size)


def start_weights_baseline(backbone: nn.Module, pairs: Any, flip: bool = True, batch_size: int = 128,
                           progress: Progress = None) -> float:
    """Verification accuracy of the backbone a fine-tune starts from (`weights=`), before its first step, with
    the run's flip fusion, on the device it is on: the figure the fine-tune must beat."""
    device = next(backbone.parameters()).device
    result, _ = evaluate_pair_set(backbone, pairs, batch_size=batch_size, flip=flip, device=device,
                                  progress=progress)
    return result["acc"]
