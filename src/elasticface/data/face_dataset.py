"""FaceDataset: what the data module needs of a training set, stated once.

RecordIO, image folders, synthetic faces or a user's own class: anything with these members trains.
`FaceDataModule` checks them when it builds the set, so a missing member is an error that names the
class and the member, not an AttributeError in the middle of a run.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from elasticface.data.faults import DroppedRecord


@runtime_checkable
class FaceDataset(Protocol):
    """A labelled training set of aligned faces; item = (uint8 [3, S, S] RGB, label) or a `DroppedRecord`."""

    #: identities: every label is in 0..num_classes-1 (the number of class centres)
    num_classes: int
    #: the label of every sample, known without decoding an image (the identity sampler groups by it)
    labels: np.ndarray
    #: how many distinct unreadable records a run may skip before it stops (counted once per record)
    max_corrupt: int
    #: records found unreadable while the set was built, before any item was read: they count toward
    #: `max_corrupt` with those met during training
    dropped_at_scan: Sequence[DroppedRecord]

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | DroppedRecord: ...


def face_dataset_members() -> tuple[str, ...]:
    """The members `FaceDataset` declares, read from its class body (the one place they are written)."""
    methods = [name for name, value in vars(FaceDataset).items()
               if inspect.isfunction(value) and value.__qualname__ == f"FaceDataset.{name}"]
    return (*FaceDataset.__annotations__, *methods)


def require_face_dataset(dataset: Any) -> FaceDataset:
    """`dataset` itself when it has every `FaceDataset` member; else a TypeError naming the class and what it lacks."""
    missing = [name for name in face_dataset_members() if not hasattr(dataset, name)]
    if missing:
        raise TypeError(
            f"{type(dataset).__module__}.{type(dataset).__qualname__} cannot be a training set: it lacks "
            f"{', '.join(missing)} (what elasticface.data.face_dataset.FaceDataset requires of data.train_dataset)"
        )
    return dataset
