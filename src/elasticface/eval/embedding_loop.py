"""The one loop that embeds a dataset: training normalisation, the protocol's flip fusion, eval mode.

Every evaluation goes through it: the verification sets, IJB-B/C, a folder of faces, and a training run's
baselines (eval/baselines.py: raw pixels and eigenfaces as the model).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from elasticface.data import transforms
from elasticface.utils.requirements import check_cuda_request
from elasticface.metrics.verification import CPU_MICRO_BATCH, VerificationAccuracy, flip_fused_embeddings
from elasticface.utils.errors import BadValue

Embedder = Callable[[Tensor], Tensor]


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_cuda_request("device", device)
    return torch.device(device)


@torch.no_grad()
def embed_dataset(
    model: Embedder,
    dataset: Dataset,
    batch_size: int = 128,
    flip: bool = True,
    device: str | torch.device = "auto",
    num_workers: int = 0,
    progress: Callable[[int], None] | None = None,
) -> tuple[Tensor, Tensor]:
    """Embed a dataset whose items are `(uint8 [3, H, W], index)`: returns (float32 [N, D] on CPU, indices).

    An nn.Module model is moved to `device` and put in eval mode (restored to train mode afterwards); `progress` is
    called with each batch's size (utils/progress.py)."""
    device = resolve_device(device)
    was_training = isinstance(model, nn.Module) and model.training
    if isinstance(model, nn.Module):
        model.to(device).eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=device.type == "cuda")
    embeddings, indices = [], []
    micro_batch = CPU_MICRO_BATCH if device.type == "cpu" else None
    try:
        for images, idx in loader:
            x = transforms.normalize(images.to(device, non_blocking=True))
            embeddings.append(flip_fused_embeddings(model, x, flip, micro_batch).cpu())
            indices.append(torch.as_tensor(idx).long())
            if progress is not None:
                progress(len(images))
    finally:
        if was_training:
            model.train()
    if not embeddings:
        raise BadValue(f"dataset {getattr(dataset, 'name', type(dataset).__name__)} is empty")
    return torch.cat(embeddings), torch.cat(indices)


def evaluate_pair_set(
    model: Embedder,
    pairs: Any,
    batch_size: int = 128,
    flip: bool = True,
    device: str | torch.device = "auto",
    num_workers: int = 0,
    num_folds: int = 10,
    far_target: float = 1e-3,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The verification protocol on a `PairSet`: (scalar results, curves for plots). Each distinct image is embedded
    once (a face in several pairs is stored several times).

    Every pair is embedded by this process, so the metric never syncs: under DDP only global rank 0 scores the
    baselines, and a gather the other ranks never join would wait for ever."""
    emb, idx = embed_dataset(model, pairs.distinct_images(), batch_size, flip, device, num_workers, progress)
    metric = VerificationAccuracy(pairs.issame, num_folds=num_folds, far_target=far_target, sync_on_compute=False,
                                  image_of=pairs.image_of)
    metric.update(emb, idx)
    result = {k: float(v) for k, v in metric.compute().items()}
    return result, metric.roc_data()
