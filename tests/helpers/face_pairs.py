"""Verification pairs a crude embedder separates: genuine pairs are a random face and a noisy copy of it,
impostor pairs two unrelated random faces (for the embedding and evaluation tests)."""

from __future__ import annotations

import numpy as np


def noisy_pairs(num_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """([2N, 112, 112, 3] uint8 faces, pair after pair, [N] bool issame): even pairs genuine (the second face is
    the first plus noise in [-20, 20]), odd pairs impostors."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (2 * num_pairs, 112, 112, 3), dtype=np.uint8)
    issame = np.arange(num_pairs) % 2 == 0
    noise = rng.integers(-20, 21, (num_pairs, 112, 112, 3))
    genuine = np.flatnonzero(issame)
    images[2 * genuine + 1] = np.clip(images[2 * genuine].astype(int) + noise[genuine], 0, 255).astype(np.uint8)
    return images, issame
