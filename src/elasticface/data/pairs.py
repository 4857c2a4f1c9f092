"""Verification pair sets: 2P images where images 2i and 2i+1 form pair i.

Every evaluation source (insightface `.bin` files and pairs lists: `elasticface.data.pair_files`; the
synthetic faces) becomes a `PairSet`, so the verification code never needs to know where the pairs came from.

A pair set stores each pair's two images, so a face in several pairs is stored several times (lfw.bin: 12,000
stored, 7,701 distinct). `distinct_images` is the set with each face once: every pass embeds those, and the
verification metric (`image_of`) gives each stored image its first copy's embedding.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from elasticface.utils.errors import BadValue


class PairSet(Dataset):
    """Base class: item i is (uint8 [3, H, W] RGB image i, i); `issame[p]` labels pair p."""

    def __init__(self, name: str, issame: np.ndarray | list[bool]) -> None:
        self.name = name
        self.issame = np.asarray(issame, dtype=bool)

    @property
    def num_pairs(self) -> int:
        return int(self.issame.shape[0])

    def __len__(self) -> int:
        return 2 * self.num_pairs

    def load_image(self, index: int) -> torch.Tensor:
        raise NotImplementedError

    def image_key(self, index: int) -> bytes | str:
        """What two stored images share exactly when they are the same image (their bytes, here decoded)."""
        return self.load_image(index).numpy().tobytes()

    @functools.cached_property
    def image_of(self) -> np.ndarray:
        """For each stored image, the index of the first stored image equal to it."""
        first: dict[bytes | str, int] = {}
        return np.array([first.setdefault(self.image_key(i), i) for i in range(len(self))], dtype=np.int64)

    def distinct_images(self) -> Subset:
        """The stored images with each one once (items `(image, its index in the set)`), in the set's order."""
        return Subset(self, np.flatnonzero(self.image_of == np.arange(len(self))).tolist())

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.load_image(index), index


class TensorPairSet(PairSet):
    """Pairs held in memory as one uint8 tensor [2P, 3, H, W] (synthetic faces, small custom sets)."""

    def __init__(self, name: str, images: torch.Tensor, issame: np.ndarray | list[bool]) -> None:
        super().__init__(name, issame)
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise BadValue(
                f"pair set '{name}': expected uint8 images [2P, 3, H, W], got {images.dtype} {tuple(images.shape)}"
            )
        if images.shape[0] != 2 * self.num_pairs:
            raise BadValue(
                f"pair set '{name}': {images.shape[0]} images for {self.num_pairs} pairs; expected {2 * self.num_pairs}"
            )
        self.images = images

    def load_image(self, index: int) -> torch.Tensor:
        return self.images[index]
