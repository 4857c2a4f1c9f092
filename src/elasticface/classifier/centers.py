"""Class-centre layers: turn embeddings into cosine logits against learned class centres.

Heads never own class weights, so any head works with any centres layer. Every layer returns
`(cos [B, C'], labels')` in float32 even under autocast: the margin arithmetic near cos = ±1 needs it.

- `FullFC`: all C (× K sub-centres) centres every step.
- `PartialFC`: insightface's Partial FC sampling: every step uses the centres of the classes present in
  the batch plus a random subset of the others (`sample_rate` of C), with labels remapped into the subset.
- `ShardedFC` (sharded.py): the same, with the classes split across DDP ranks (model parallel).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FullFC(nn.Module):
    """All class centres, one row per (class, sub-centre): row c*K + k."""

    def __init__(self, embedding_size: int, num_classes: int, centers_per_class: int = 1, normalize: bool = True,
                 init_std: float = 0.01) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes={num_classes}: must be >= 1")
        if centers_per_class < 1:
            raise ValueError(f"centers_per_class={centers_per_class}: must be >= 1")
        self.num_classes = num_classes
        self.centers_per_class = centers_per_class
        self.normalize = normalize
        self.weight = nn.Parameter(torch.empty(num_classes * centers_per_class, embedding_size).normal_(0.0, init_std))

    def logits(self, embeddings: Tensor, weight: Tensor) -> Tensor:
        """Cosine (or, for plain softmax, inner-product) logits in fp32."""
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            emb, w = embeddings.float(), weight.float()
            if not self.normalize:
                return F.linear(emb, w)
            return F.linear(F.normalize(emb, dim=1), F.normalize(w, dim=1)).clamp_(-1.0, 1.0)

    def rows(self, labels: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """``(rows, labels')``: the rows of `weight` this step uses (None: all of them, in order) and the labels
        remapped into them. The chunked class layer reads those rows chunk by chunk and writes their gradient
        straight into the centres' own (no gathered [C'·K, D] copy, nor a gradient of one)."""
        return None, labels

    def columns(self, labels: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """``(weight [C'·K, D], labels')``: the centres this step uses and the labels remapped into them."""
        rows, labels = self.rows(labels)
        return (self.weight if rows is None else self.weight[rows]), labels

    def forward(self, embeddings: Tensor, labels: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        weight, labels = self.columns(labels)
        return self.logits(embeddings, weight), labels


class PartialFC(FullFC):
    """Partial FC (An et al. 2022): positives plus a uniform sample of negatives, `sample_rate` of all classes.

    In eval mode, or with sample_rate = 1, it is FullFC. Labels are remapped to column indices of the
    sampled subset, so heads and cross-entropy see an ordinary (smaller) classification problem.
    """

    def __init__(self, embedding_size: int, num_classes: int, sample_rate: float = 0.1, centers_per_class: int = 1,
                 normalize: bool = True, init_std: float = 0.01) -> None:
        super().__init__(embedding_size, num_classes, centers_per_class, normalize, init_std)
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate={sample_rate}: must be in (0, 1]")
        self.sample_rate = sample_rate
        self.num_sample = max(1, int(round(sample_rate * num_classes)))
        self.last_sampled_classes: Tensor | None = None

    def sample_classes(self, labels: Tensor, num_classes: int | None = None, num_sample: int | None = None) -> Tensor:
        """Sorted class ids: all classes in `labels` (rows -1 name none), topped up with random others.

        As insightface's Partial FC (`partial_fc_v2.py`: positives scored 2, uniform scores elsewhere, top-k),
        but of a size fixed before the data is seen, max(`num_sample`, B) capped at the class count, so the
        step never reads the number of distinct labels back from the device. insightface takes exactly the
        distinct positives where they outnumber `num_sample`; that happens only when B > `num_sample`, where
        this adds random classes up to B instead.
        """
        num_classes = self.num_classes if num_classes is None else num_classes
        num_sample = self.num_sample if num_sample is None else num_sample
        num_sample = min(num_classes, max(num_sample, labels.numel()))
        score = torch.rand(num_classes + 1, device=labels.device)
        # positives always win the top-k; rows without a label mark the spare last score, which is then dropped
        score.index_fill_(0, torch.where(labels >= 0, labels, num_classes), 2.0)
        return torch.topk(score[:num_classes], num_sample, sorted=False).indices.sort().values

    def sampled_rows(self, labels: Tensor, num_classes: int, num_sample: int) -> tuple[Tensor, Tensor]:
        """The sampled classes' rows of `self.weight` (which holds `num_classes` classes), labels remapped."""
        classes = self.sample_classes(labels, num_classes, num_sample)
        self.last_sampled_classes = classes
        k = self.centers_per_class
        rows = (classes[:, None] * k + torch.arange(k, device=classes.device)).reshape(-1) if k > 1 else classes
        remapped = torch.searchsorted(classes, labels.clamp_min(0))
        remapped = torch.where(labels >= 0, remapped, labels)
        return rows, remapped

    def rows(self, labels: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        if labels is None or not self.training or self.num_sample >= self.num_classes:
            return super().rows(labels)
        return self.sampled_rows(labels, self.num_classes, self.num_sample)
