"""Weight imprinting (Qi et al., "Low-Shot Learning with Imprinted Weights", 2018): each class centre starts at
the mean direction of the loaded backbone's embeddings of that class instead of at random.

With random centres every training face starts near 90 degrees from its centre, and the first steps' large
gradients flow into a backbone that already separates the new people; imprinted centres start the margin loss
where the loaded backbone already is. One pass over the training set before the first step, the backbone in eval
mode, each face embedded once (no mirror image: the training faces are mirrored at random anyway).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elasticface.data import transforms
from elasticface.data.faults import DroppedRecord
from elasticface.metrics.verification import CPU_MICRO_BATCH, flip_fused_embeddings
from elasticface.utils.errors import BadValue

KEY = "finetune.imprint_centers"


def _class_name(train_set: Any, label: int) -> str:
    classes = getattr(train_set, "classes", None)
    return f"{label} ({classes[label]})" if classes is not None and label < len(classes) else str(label)


@torch.no_grad()
def class_means(embed: Callable[[Tensor], Tensor], train_set: Any, num_classes: int, batch_size: int = 128,
                image_size: int | None = None, device: str | torch.device = "cpu",
                progress: Callable[[int], None] | None = None, micro_batch: int | None = None) -> Tensor:
    """[C, D] float32: per class, the L2-normalised mean of its faces' L2-normalised embeddings. Items of
    `train_set` are `(uint8 [3, H, W], label)` (a `DroppedRecord` is skipped); `image_size` resizes as training
    does; `micro_batch` faces are embedded at a time (`flip_fused_embeddings`); `progress` is called with each batch's
    size. A class without a single readable face is an error naming it and the key."""
    labels = getattr(train_set, "labels", None)
    if labels is not None:
        counts = torch.bincount(torch.as_tensor(labels, dtype=torch.long), minlength=num_classes)
        empty = (counts[:num_classes] == 0).nonzero().flatten().tolist()
        if empty:
            raise BadValue(f"{KEY}=true: class {_class_name(train_set, empty[0])} has no training image "
                             f"({len(empty)} such classes), so its centre has no mean to start at; remove its "
                             f"folder or set {KEY}=false")
    sums: Tensor | None = None
    seen = torch.zeros(num_classes, dtype=torch.long)

    def flush(images: Sequence[Tensor], batch_labels: list[int]) -> None:
        nonlocal sums
        x = transforms.normalize(torch.stack(list(images)).to(device))
        if image_size is not None:
            x = transforms.resize(x, image_size)
        emb = F.normalize(flip_fused_embeddings(embed, x, False, micro_batch), dim=1).cpu()
        if sums is None:
            sums = torch.zeros(num_classes, emb.shape[1])
        index = torch.as_tensor(batch_labels, dtype=torch.long)
        sums.index_add_(0, index, emb)
        seen.index_add_(0, index, torch.ones_like(index))
        if progress is not None:
            progress(len(batch_labels))

    images: list[Tensor] = []
    batch_labels: list[int] = []
    for i in range(len(train_set)):
        item = train_set[i]
        if isinstance(item, DroppedRecord):  # unreadable: the training set counts it
            continue
        images.append(item[0])
        batch_labels.append(int(item[1]))
        if len(images) == batch_size:
            flush(images, batch_labels)
            images, batch_labels = [], []
    if images:
        flush(images, batch_labels)
    empty = (seen == 0).nonzero().flatten().tolist()
    if sums is None or empty:
        first = _class_name(train_set, empty[0]) if empty else "0"
        raise BadValue(f"{KEY}=true: class {first} has no readable training image, so its centre has no mean to "
                         f"start at; set {KEY}=false")
    return F.normalize(sums, dim=1)


def imprint_centers(model: nn.Module, train_set: Any, batch_size: int = 128, image_size: int | None = None,
                    progress: Callable[[int], None] | None = None) -> Tensor:
    """Set the class centres of `model` (a FaceRecognitionModule with one centre per class) to the class means of
    its backbone's embeddings, on the device the model is on; returns the means. The backbone is in eval mode for
    the pass, then as before."""
    centers = model.centers
    if getattr(centers, "centers_per_class", 1) != 1:
        raise BadValue(f"{KEY}=true: the head keeps {centers.centers_per_class} sub-centres per class, which one "
                         f"mean would make identical (they would never move apart); set {KEY}=false")
    if not getattr(model.head, "normalized", True):
        raise BadValue(f"{KEY}=true: the head compares raw inner products (not cosines), which a class mean of "
                         f"unit embeddings does not start; set {KEY}=false")
    weight = centers.weight
    was_training = model.backbone.training
    model.backbone.eval()
    try:  # on a CPU a few faces at a time, as every eager embedding pass (the caller runs it eagerly)
        means = class_means(model.embed, train_set, model.hparams.num_classes, batch_size, image_size,
                            weight.device, progress, CPU_MICRO_BATCH if weight.device.type == "cpu" else None)
    finally:
        model.backbone.train(was_training)
    if weight.shape != means.shape:
        raise BadValue(f"{KEY}=true: the class centres are {tuple(weight.shape)}, the class means "
                         f"{tuple(means.shape)}; imprinting needs every class's centre in this process")
    with torch.no_grad():
        weight.copy_(means.to(weight.dtype))
    return means
