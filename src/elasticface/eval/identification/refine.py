"""MegaFace (R): the noise lists applied to the features, as insightface's remove_noises.py does.

Every feature gets one more coordinate (513 for 512-d), 0 unless said otherwise. A probe that
facescrub_noises.txt names (a wrongly labelled FaceScrub image) becomes its identity's sum of clean features
plus uniform noise in +-0.001 on the first coordinates, L2-normalised: it then finds its mates. A distractor that
megaface_noises.txt names (a FaceScrub person among the distractors) gets the extra coordinate 100: so far from
every probe that it can never rank. Probes' extra coordinate stays 0, so scoring needs the extension only as
each distractor's extra squared norm (`distractor_extra`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from elasticface.eval.identification.testpack import PROBE_NOISES

EXTENSION = 100.0  # the extra coordinate of a noisy distractor
NOISE = 0.001      # the half-width of the uniform noise added to a noisy probe's identity centre


def refine_probes(features: np.ndarray, identities: Sequence[str], noisy: np.ndarray, seed: int = 0,
                  problems: list[str] | None = None) -> np.ndarray:
    """float32 [P, d]: the probes' features with each noisy one replaced by its identity's noisy centre. An
    identity without a clean image keeps its features (remove_noises.py stops there), counted in one line."""
    feats = np.asarray(features, dtype=np.float32)
    out = feats.copy()
    ids = np.asarray(identities)
    noisy = np.asarray(noisy, dtype=bool)
    rng = np.random.default_rng(seed)
    left = []
    for i in np.flatnonzero(noisy):
        clean = (ids == ids[i]) & ~noisy
        if not clean.any():
            left.append(str(ids[i]))
            continue
        f = feats[clean].sum(0, dtype=np.float32) + rng.uniform(-NOISE, NOISE, feats.shape[1]).astype(np.float32)
        out[i] = f / np.linalg.norm(f)
    if left and problems is not None:
        problems.append(f"{PROBE_NOISES}: {len(left)} noisy probe(s) of identities with no clean image keep "
                        f"their features (e.g. {left[0]})")
    return out


def distractor_extension(noisy: np.ndarray) -> np.ndarray:
    """float32 [N]: each distractor's extra coordinate (EXTENSION where noisy, else 0)."""
    return np.where(np.asarray(noisy, dtype=bool), EXTENSION, 0.0).astype(np.float32)


def extend(features: np.ndarray, extension: np.ndarray | float = 0.0) -> np.ndarray:
    """float32 [N, d + 1]: the features with their extra coordinate, as remove_noises.py writes them."""
    feats = np.asarray(features, dtype=np.float32)
    ext = np.broadcast_to(np.asarray(extension, dtype=np.float32), (feats.shape[0],))
    return np.concatenate([feats, ext[:, None]], axis=1)
