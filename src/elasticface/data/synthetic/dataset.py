"""The synthetic training dataset: identities x images, rendered on first read into a shared cache."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from elasticface.data.faults import DroppedRecord
from elasticface.data.synthetic.params import identity_params, identity_scale, variation_params
from elasticface.data.synthetic.render import IMAGE_SIZE, render_face_chw
from elasticface.utils.errors import BadValue


class SyntheticFaces(Dataset):
    """Training faces: ``num_identities`` identities x ``images_per_identity`` images, deterministic from ``seed``.

    Item ``i`` is (uint8 RGB tensor [3, 112, 112], label in [0, num_identities)): image
    ``i % images_per_identity`` of identity id ``identity_offset + i // images_per_identity``.
    Identity ids, not labels, fix the appearance, so datasets with disjoint id ranges (train vs.
    :func:`synthetic_pairs`) have disjoint identities.

    ``intra_class_variation`` scales all per-image nuisance (0: every image of an identity is the same);
    ``variation_spread`` in [0, 1] makes some identities vary more than others (their scale is
    ``intra_class_variation * (1 + variation_spread * level)`` with a per-identity level in [-1, 1]).
    ``identity_variation``, one factor per identity, sets those scales explicitly instead
    (``intra_class_variation * identity_variation[label]``): the paper's toy example uses it for
    identities of low and of high intra-class variation.

    With ``cache=True`` an image is rendered the first time it is read and kept in a uint8 tensor in an
    anonymous shared mapping (len x 37.6 kB), so forked DataLoader workers fill one cache together;
    ``render_all()`` fills it eagerly. Items are views into the cache: do not modify them in place.
    With ``cache=False``, or in a pickled copy (spawn workers), every read renders again (same bytes:
    rendering is deterministic, ~2 ms per image). A `FaceDataset` (`elasticface.data.face_dataset`) that
    never drops a record: every image is rendered, none is read from a file.
    """

    max_corrupt = 0
    dropped_at_scan: tuple[DroppedRecord, ...] = ()

    def __init__(
        self,
        num_identities: int = 100,
        images_per_identity: int = 40,
        seed: int = 0,
        identity_offset: int = 0,
        intra_class_variation: float = 1.0,
        variation_spread: float = 0.5,
        cache: bool = True,
        identity_variation: Sequence[float] | None = None,
    ) -> None:
        if num_identities < 1 or images_per_identity < 1:
            raise BadValue(
                f"need at least one identity and one image per identity, got {num_identities} x {images_per_identity}"
            )
        if intra_class_variation < 0 or not 0 <= variation_spread <= 1:
            raise BadValue(
                "intra_class_variation must be >= 0 and variation_spread in [0, 1], "
                f"got {intra_class_variation}, {variation_spread}"
            )
        if identity_variation is not None and (
            len(identity_variation) != num_identities or any(float(v) < 0 for v in identity_variation)
        ):
            raise BadValue(
                f"identity_variation={list(identity_variation)}: expected {num_identities} factors >= 0, "
                "one per identity (num_identities)"
            )
        self.identity_variation = None if identity_variation is None else [float(v) for v in identity_variation]
        self.num_identities = int(num_identities)
        self.images_per_identity = int(images_per_identity)
        self.seed = int(seed)
        self.identity_offset = int(identity_offset)
        self.intra_class_variation = float(intra_class_variation)
        self.variation_spread = float(variation_spread)
        self.num_classes = self.num_identities
        self.labels = np.repeat(np.arange(self.num_identities, dtype=np.int64), self.images_per_identity)
        self.identity_ids = np.arange(self.identity_offset, self.identity_offset + self.num_identities, dtype=np.int64)
        self._idents: dict[int, dict[str, Any]] = {}
        self._cache: torch.Tensor | None = None
        self._done: torch.Tensor | None = None
        if cache:
            self._cache = _shared_zeros((len(self), 3, IMAGE_SIZE, IMAGE_SIZE), np.uint8)
            self._done = _shared_zeros((len(self),), np.bool_)

    def __len__(self) -> int:
        return self.num_identities * self.images_per_identity

    def __getstate__(self) -> dict[str, Any]:
        # Pickled (spawn / forkserver workers): the shared mapping cannot travel, and a private cache per
        # worker would multiply memory, so the copy renders on the fly (same bytes: rendering is deterministic).
        state = self.__dict__.copy()
        state["_cache"] = state["_done"] = None
        return state

    def _identity(self, identity: int) -> dict[str, Any]:
        ident = self._idents.get(identity)
        if ident is None:
            ident = self._idents[identity] = identity_params(identity, self.seed)
        return ident

    def render(self, index: int) -> torch.Tensor:
        """Render item ``index`` (no cache): uint8 [3, 112, 112]."""
        return torch.from_numpy(self._render_chw(index))

    def _render_chw(self, index: int) -> np.ndarray:
        label, image_index = divmod(int(index), self.images_per_identity)
        identity = self.identity_offset + label
        ident = self._identity(identity)
        if self.identity_variation is not None:
            scale = self.intra_class_variation * self.identity_variation[label]
        else:
            scale = identity_scale(ident, self.intra_class_variation, self.variation_spread)
        return render_face_chw(ident, variation_params(identity, image_index, self.seed, scale))

    def render_all(self) -> SyntheticFaces:
        """Fill the cache now (no-op without cache); returns self."""
        if self._cache is not None:
            for i in range(len(self)):
                self[i]
        return self

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} synthetic faces")
        label = int(self.labels[index])
        if self._cache is None:
            return self.render(index), label
        if not bool(self._done[index]):
            # write through numpy: torch's threaded copy is slow for many small tensors on few cores
            self._cache.numpy()[index] = self._render_chw(index)
            self._done[index] = True  # after the image: a reader in another worker never sees a half-written one
        return self._cache[index], label


def _shared_zeros(shape: tuple[int, ...], dtype: np.dtype) -> torch.Tensor:
    """Zeroed tensor in an anonymous shared mapping: forked DataLoader workers write into the parent's copy.

    Unlike ``Tensor.share_memory_()`` this does not live in /dev/shm, so a small /dev/shm (Docker's 64 MB
    default) cannot make the cache crash with SIGBUS. Where the mapping is not shared (Windows) it is
    simply private memory.
    """
    count = int(np.prod(shape))
    nbytes = max(count * np.dtype(dtype).itemsize, 1)
    try:
        buffer = mmap.mmap(-1, nbytes)
    except (OSError, ValueError):
        return torch.from_numpy(np.zeros(shape, dtype=dtype))
    return torch.from_numpy(np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape))
