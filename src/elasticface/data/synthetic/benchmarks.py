"""Verification pairs on synthetic faces, and the named benchmarks ``data.val_sets.names`` selects.

Every benchmark draws its pairs from identities never trained on (ids from ``identity_offset`` on, each
benchmark its own range) and stresses one kind of nuisance, so that a parameter selection can rank
models per benchmark and sum the ranks (the paper's Borda count) as it does over LFW, AgeDB-30, ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from elasticface.data.pairs import TensorPairSet
from elasticface.data.synthetic.params import (
    NUISANCE_GROUPS,
    identity_params,
    identity_scale,
    seed_sequence,
    variation_params,
)
from elasticface.data.synthetic.render import IMAGE_SIZE, render_face_chw
from elasticface.utils.errors import BadValue


@dataclass(frozen=True)
class Benchmark:
    """One synthetic pair set: its identity range and how its nuisance differs from training's."""

    offset: int  # added to ``identity_offset``: every benchmark has its own identities
    factors: Mapping[str, float] = field(default_factory=dict)  # per nuisance group (params.NUISANCE_GROUPS)
    variation: float = 1.0  # multiplies ``intra_class_variation``
    spread: float | None = None  # replaces ``variation_spread`` when set
    about: str = ""


def _stress(group: str, factor: float, rest: float = 0.5) -> dict[str, float]:
    """``group`` at ``factor``, every other nuisance group at ``rest``."""
    return {g: (factor if g == group else rest) for g in NUISANCE_GROUPS}


SYNTHETIC_BENCHMARKS: dict[str, Benchmark] = {
    "synthetic": Benchmark(0, about="every nuisance at its training level (the default set)"),
    "pose": Benchmark(10_000, _stress("pose", 2.0), about="pose (shift, scale, roll, yaw) doubled, the rest halved"),
    "lighting": Benchmark(
        20_000, _stress("lighting", 2.0), about="lighting (gain, contrast, direction, cast) doubled, the rest halved"
    ),
    "expression": Benchmark(
        30_000, _stress("expression", 2.5), about="expression (smile, mouth, eyes, brows, gaze) x2.5, the rest halved"
    ),
    "hard": Benchmark(
        40_000, variation=1.5, spread=1.0, about="all nuisance x1.5, identities spread fully between calm and wild"
    ),
}


def synthetic_pairs(
    name: str = "synthetic",
    num_identities: int = 50,
    num_pairs: int = 600,
    seed: int = 1,
    identity_offset: int = 100000,
    intra_class_variation: float = 1.0,
    variation_spread: float = 0.5,
    factors: Mapping[str, float] | None = None,
) -> TensorPairSet:
    """Verification pairs over identity ids ``identity_offset .. identity_offset + num_identities - 1``.

    Exactly half of the ``num_pairs`` pairs are same-identity; same and different pairs alternate
    in a shuffled order within each block of 10 pairs, so any contiguous fold is balanced. Every
    image is a distinct rendering (image indices are never reused). Deterministic from ``seed``.
    ``factors`` scales nuisance groups (see ``variation_params``).
    """
    if num_pairs < 2 or num_pairs % 2:
        raise BadValue(f"num_pairs must be even and >= 2 (half same, half different), got {num_pairs}")
    if num_identities < 2:
        raise BadValue(f"need at least 2 identities for different-identity pairs, got {num_identities}")
    rng = np.random.default_rng(seed_sequence(0x9A, seed, identity_offset, num_identities, num_pairs))
    issame = np.tile(np.array([True, False]), num_pairs // 2)
    for b in range(0, num_pairs, 10):
        rng.shuffle(issame[b : b + 10])
    first = rng.integers(num_identities, size=num_pairs)
    other = (first + rng.integers(1, num_identities, size=num_pairs)) % num_identities
    second = np.where(issame, first, other)
    ids = identity_offset + np.stack([first, second], axis=1).reshape(-1)

    idents = {int(i): identity_params(int(i), seed) for i in np.unique(ids)}
    counters: dict[int, int] = {}
    images = np.empty((2 * num_pairs, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    for k, identity in enumerate(ids.tolist()):
        image_index = counters.get(identity, 0)
        counters[identity] = image_index + 1
        ident = idents[identity]
        scale = identity_scale(ident, intra_class_variation, variation_spread)
        images[k] = render_face_chw(ident, variation_params(identity, image_index, seed, scale, factors))
    pairs = TensorPairSet(name, torch.from_numpy(images), issame)
    pairs.identity_ids = ids.reshape(num_pairs, 2)  # [P, 2] identity id of both images of each pair
    return pairs


def synthetic_val_sets(
    names: Sequence[str] = ("synthetic",),
    num_identities: int = 100,
    num_pairs: int = 1000,
    seed: int = 1,
    identity_offset: int = 100000,
    intra_class_variation: float = 1.0,
    variation_spread: float = 0.5,
) -> dict[str, TensorPairSet]:
    """The named benchmarks of :data:`SYNTHETIC_BENCHMARKS`, each ``num_pairs`` pairs over its own
    ``num_identities`` identities: ``{name: TensorPairSet}`` (``data.val_sets.names`` in the config)."""
    if isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in SYNTHETIC_BENCHMARKS]
    if unknown or not names:
        raise BadValue(f"data.val_sets.names={list(names)}: unknown synthetic benchmark(s) {unknown}; "
                         f"expected some of {list(SYNTHETIC_BENCHMARKS)}")
    sets = {}
    for name in names:
        b = SYNTHETIC_BENCHMARKS[name]
        spread = variation_spread if b.spread is None else b.spread
        sets[name] = synthetic_pairs(name, num_identities, num_pairs, seed, identity_offset + b.offset,
                                     intra_class_variation * b.variation, spread, b.factors or None)
    return sets
