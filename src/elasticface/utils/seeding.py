"""One seed per (run seed, rank, step): every random draw of a step can be replayed on resume.

The elastic heads' margins and the data module's flips and augmentations both draw from it, so a run
resumed at step s draws exactly what the uninterrupted run drew, on every rank.
"""

from __future__ import annotations

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def stream_seed(seed: int, rank: int, step: int) -> int:
    """A well-mixed 63-bit seed for draw ``step`` of ``rank`` in the stream ``seed``."""
    return _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ rank) ^ step) & ((1 << 63) - 1)
