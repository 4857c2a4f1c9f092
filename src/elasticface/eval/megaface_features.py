"""The MegaFace devkit's feature files: `<image>_<algo>.bin`, one per image, as gen_megaface.py writes them.

A file is the devkit's OpenCV matrix: four little-endian int32 header words (rows = the dimension, cols = 1,
4 = the element size, 5 = CV_32F), then `rows` float32 values; nothing else. The folders follow gen_megaface.py:
`<out>/facescrub/<identity>/<file>_<algo>.bin` and `<out>/megaface/<a1>/<a2>/<file>_<algo>.bin`; MegaFace (R)'s
features (remove_noises.py's, one coordinate longer) go to a second folder in the same layout. Files are data:
a header that does not match the file's size is refused, naming the file, never trusted for an allocation.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

HEADER_TAIL = (1, 4, 5)  # cols, element size, CV_32F
_HEADER = np.dtype("<i4")
_VALUES = np.dtype("<f4")


def feature_bytes(vector: np.ndarray) -> bytes:
    """The file's bytes for one feature vector."""
    v = np.asarray(vector, dtype=_VALUES).reshape(-1)
    return np.array([v.shape[0], *HEADER_TAIL], dtype=_HEADER).tobytes() + v.tobytes()


def write_feature(path: str, vector: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(feature_bytes(vector))


def read_feature(path: str, dim: int | None = None) -> np.ndarray:
    """float32 [rows] of one feature file; ValueError naming the file when its header or size is not a feature
    of `dim` (None: any) values."""
    with open(path, "rb") as f:
        data = f.read(16 + 4 * 65536 + 1)  # a feature longer than 65,536 values is not one: never read it all
    if len(data) < 16:
        raise ValueError(f"{path}: {len(data)} bytes; a devkit feature file starts with a 16-byte header")
    rows, *tail = (int(v) for v in np.frombuffer(data[:16], dtype=_HEADER))
    if tuple(tail) != HEADER_TAIL or rows < 1 or len(data) != 16 + 4 * rows:
        raise ValueError(f"{path}: {len(data)} bytes with header ({rows}, {', '.join(map(str, tail))}); expected "
                         f"(dim, 1, 4, 5) and 16 + 4 x dim bytes (the devkit's float32 matrix file)")
    if dim is not None and rows != dim:
        raise ValueError(f"{path}: a feature of {rows} values where the others have {dim}")
    return np.frombuffer(data[16:], dtype=_VALUES).copy()


def probe_file(folder: str, probe: str, algo: str) -> str:
    identity, name = probe.split("/")[-2:]
    return os.path.join(folder, "facescrub", identity, f"{name}_{algo}.bin")


def distractor_file(folder: str, distractor: str, algo: str) -> str:
    a1, a2, name = distractor.split("/")[-3:]
    return os.path.join(folder, "megaface", a1, a2, f"{name}_{algo}.bin")


def write_features(paths: Iterable[str], features: np.ndarray) -> None:
    """One file per row; folders made as needed."""
    made: set[str] = set()
    for path, row in zip(paths, features):
        folder = os.path.dirname(path)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        write_feature(path, row)


def read_features(paths: Sequence[str], problems: list[str], what: str,
                  dtype: np.dtype | type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """([N, dim] of `dtype`, valid [N]): files that are missing or not a feature of the first one's size are
    skipped (a zero row, valid False), counted in one line of `problems` naming the first."""
    out: np.ndarray | None = None
    valid = np.zeros(len(paths), dtype=bool)
    bad: list[str] = []
    for i, path in enumerate(paths):
        try:
            v = read_feature(path, None if out is None else out.shape[1])
        except (OSError, ValueError) as exc:
            bad.append(str(exc))
            continue
        if out is None:
            out = np.zeros((len(paths), v.shape[0]), dtype=dtype)
        out[i], valid[i] = v, True
    if bad:
        problems.append(f"{what}: {len(bad)} of {len(paths)} feature files unreadable or of the wrong size "
                        f"(skipped; first: {bad[0]})")
    if out is None:
        raise ValueError(f"{what}: not one readable feature file among {len(paths)} (first: {bad[0] if bad else '-'})")
    return out, valid
