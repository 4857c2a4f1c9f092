"""The Borda count of the paper's parameter selection (Tables I and II).

Within one loss family, each benchmark ranks the rows: the lowest accuracy gets 1, the highest the
family's row count, and tied rows all get the highest rank of the tie (scipy's ``rankdata(method="max")``).
A row's Borda sum adds its ranks over the benchmarks; the highest sum wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def max_ranks(values: Sequence[float]) -> list[int]:
    """Rank of each value among ``values``: how many values are <= it (ties share the highest rank)."""
    x = np.asarray(values, dtype=np.float64)
    return [int(r) for r in (x[None, :] <= x[:, None]).sum(axis=1)]


def borda(rows: Sequence[Mapping[str, float]], benchmarks: Sequence[str]) -> tuple[list[dict[str, int]], list[int]]:
    """Per-benchmark ranks of every row (one family) and their sums, in the order of ``rows``."""
    per_bench = {b: max_ranks([row[b] for row in rows]) for b in benchmarks}
    ranks = [{b: per_bench[b][i] for b in benchmarks} for i in range(len(rows))]
    return ranks, [sum(r.values()) for r in ranks]
