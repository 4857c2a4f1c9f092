"""The scans of the distractors that give every requested distractor count from as few passes as possible.

Without the devkit's lists every size is the first n of one permutation drawn by `seed`, so the sets are nested and
one pass scores every size; a devkit list is a scan of its own. The verification set (TAR at FAR) is read in one
of the scans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Pass:
    """One scan of the distractors: their rows in scan order, the counts after which ranks are read, and how
    many of the first rows are the verification set (0: none)."""

    order: np.ndarray
    checkpoints: list[int]
    verify_at: int = 0
    labels: dict[int, int] = field(default_factory=dict)  # checkpoint -> the distractor count it is reported as


def plan_passes(available: np.ndarray, sizes: Sequence[int], seed: int, lists: dict[int, np.ndarray],
                problems: list[str]) -> list[Pass]:
    """The scans that give every requested size (the devkit's list where given, else the first n of a permutation
    drawn by `seed`) and every available distractor. Verification is on the largest requested size, or on every
    distractor when a requested size is more than the testpack holds."""
    n = len(available)
    fits = sorted({int(s) for s in sizes if int(s) <= n})
    over = sorted({int(s) for s in sizes if int(s) > n})
    if over:
        problems.append(f"{', '.join(f'{s:,}' for s in over)} distractors requested; the testpack holds {n:,}: "
                        f"the largest available ({n:,}) is reported")
    verify = n if over or not fits else fits[-1]
    seeded = Pass(available[np.random.default_rng(seed).permutation(n)], [])
    passes = []
    for size in fits:
        rows = lists.get(size)
        if rows is None:
            seeded.checkpoints.append(size)
            seeded.labels[size] = size
            continue
        rows = rows[np.isin(rows, available)]
        if size == fits[-1]:  # the largest list's scan goes on over the rest: every distractor without a pass
            rest = np.setdiff1d(available, rows)
            passes.append(Pass(np.concatenate([rows, rest]), [len(rows), n], 0, {len(rows): size, n: n}))
        else:
            passes.append(Pass(rows, [len(rows)], 0, {len(rows): size}))
    if not any(n in p.checkpoints for p in passes) and n not in seeded.checkpoints:
        seeded.checkpoints.append(n)
        seeded.labels[n] = n
    if seeded.checkpoints:
        passes.insert(0, seeded)
    for p in passes:  # the one scan that reaches the verification set
        at = [cp for cp, label in p.labels.items() if label == verify]
        if at and not any(q.verify_at for q in passes):
            p.verify_at = at[0]
    if not any(p.verify_at for p in passes):  # a list that came out short of its size: its scan's first count
        passes[-1].verify_at = passes[-1].checkpoints[0]
    return passes
