"""A `FaceDataset` made up in memory, for the data module's tests: plain faces, chosen records unreadable."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from elasticface.data.faults import DroppedRecord


class ListFaces:
    """`size` faces: image i is uniform grey level i % 256, label i % num_classes (or `labels[i]`).

    An index in `unreadable` yields a `DroppedRecord` of `source`, as a real dataset does for a corrupt record;
    `dropped_at_scan` stands for records a dataset found bad while it was built.
    """

    def __init__(self, size: int = 10, num_classes: int = 3, unreadable: Iterable[int] = (), max_corrupt: int = 10,
                 labels: Sequence[int] | None = None, source: str = "tiny.rec",
                 dropped_at_scan: Sequence[DroppedRecord] = ()) -> None:
        self.size, self.num_classes, self.max_corrupt, self.source = size, num_classes, max_corrupt, source
        self.unreadable = set(unreadable)
        self.labels = np.asarray(labels if labels is not None else np.arange(size) % num_classes, dtype=np.int64)
        self.dropped_at_scan = list(dropped_at_scan)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | DroppedRecord:
        if index in self.unreadable:
            return DroppedRecord(self.source, str(index), "unreadable")
        return torch.full((3, 112, 112), index % 256, dtype=torch.uint8), int(self.labels[index])
