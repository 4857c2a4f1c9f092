"""The MegaFace devkit's feature files: `<image>_<algo>.bin`, one per image, as gen_megaface.py writes them.

A file is the devkit's OpenCV matrix: four little-endian int32 header words (rows = the dimension, cols = 1,
4 = the element size, 5 = CV_32F), then `rows` float32 values; nothing else. The folders follow gen_megaface.py:
`<out>/facescrub/<identity>/<file>_<algo>.bin` and `<out>/megaface/<a1>/<a2>/<file>_<algo>.bin`; MegaFace (R)'s
features (remove_noises.py's, one coordinate longer) go to a second folder in the same layout. Files are data:
a header that does not match the file's size is refused, naming the file, never trusted for an allocation.
A list entry whose components would put its file outside the folder (`..`, or a link leading out) is refused
(`BadFile` naming the entry), and each file is written whole or not at all (a temporary name, renamed).
`megaface.devkit_out=` writes both views' files (`distractor_writer`, `write_probe_files`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from elasticface.eval.identification.refine import distractor_extension, extend
from elasticface.eval.identification.testpack import Testpack
from elasticface.utils.output_paths import atomic_path, inside, inside_lexically
from elasticface.utils.errors import BadFile, BadValue

HEADER_TAIL = (1, 4, 5)  # cols, element size, CV_32F
_HEADER = np.dtype("<i4")
_VALUES = np.dtype("<f4")


def feature_bytes(vector: np.ndarray) -> bytes:
    """The file's bytes for one feature vector."""
    v = np.asarray(vector, dtype=_VALUES).reshape(-1)
    return np.array([v.shape[0], *HEADER_TAIL], dtype=_HEADER).tobytes() + v.tobytes()


def write_feature(path: str, vector: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:  # no fsync: a million files; a kill leaves no half file
        f.write(feature_bytes(vector))


def read_feature(path: str, dim: int | None = None) -> np.ndarray:
    """float32 [rows] of one feature file; ValueError naming the file when its header or size is not a feature
    of `dim` (None: any) values."""
    with open(path, "rb") as f:
        data = f.read(16 + 4 * 65536 + 1)  # a feature longer than 65,536 values is not one: never read it all
    if len(data) < 16:
        raise BadFile(f"{path}: {len(data)} bytes; a devkit feature file starts with a 16-byte header")
    rows, *tail = (int(v) for v in np.frombuffer(data[:16], dtype=_HEADER))
    if tuple(tail) != HEADER_TAIL or rows < 1 or len(data) != 16 + 4 * rows:
        raise BadFile(f"{path}: {len(data)} bytes with header ({rows}, {', '.join(map(str, tail))}); expected "
                         f"(dim, 1, 4, 5) and 16 + 4 x dim bytes (the devkit's float32 matrix file)")
    if dim is not None and rows != dim:
        raise BadFile(f"{path}: a feature of {rows} values where the others have {dim}")
    return np.frombuffer(data[16:], dtype=_VALUES).copy()


class FeaturePath(str):
    """A feature file's path that remembers the folder it was built under (`root`), where `write_features` checks
    that it lands."""

    root: str
    entry: str

    def __new__(cls, path: str, root: str, entry: str) -> FeaturePath:
        made = super().__new__(cls, path)
        made.root, made.entry = root, entry
        return made

    def __reduce__(self) -> tuple:
        return FeaturePath, (str(self), self.root, self.entry)


#: the folders `megaface.devkit_out=DIR` writes: DIR/feature_out (raw, as gen_megaface.py) and DIR/feature_out_clean
RAW_FOLDER, CLEAN_FOLDER = "feature_out", "feature_out_clean"


def features_folder(folder: str) -> str:
    """The raw feature files' folder: `megaface.features=` takes the folder `megaface.devkit_out=` was given (its
    feature_out/ is read) or gen_megaface.py's feature_out/ itself."""
    inner = os.path.join(folder, RAW_FOLDER)
    return inner if os.path.isdir(inner) else folder


def probe_file(folder: str, probe: str, algo: str) -> FeaturePath:
    """`<folder>/facescrub/<identity>/<file>_<algo>.bin` of a probe list entry; `BadFile` naming the entry if its
    components climb out of `folder`."""
    identity, name = probe.split("/")[-2:]
    path = inside_lexically(folder, os.path.join("facescrub", identity, f"{name}_{algo}.bin"),
                            f"the probe list entry {probe!r}")
    return FeaturePath(path, folder, probe)


def distractor_file(folder: str, distractor: str, algo: str) -> FeaturePath:
    """`<folder>/megaface/<a1>/<a2>/<file>_<algo>.bin` of a distractor list entry; `BadFile` naming the entry if
    its components climb out of `folder`."""
    a1, a2, name = distractor.split("/")[-3:]
    path = inside_lexically(folder, os.path.join("megaface", a1, a2, f"{name}_{algo}.bin"),
                            f"the distractor list entry {distractor!r}")
    return FeaturePath(path, folder, distractor)


def write_features(paths: Iterable[str], features: np.ndarray) -> None:
    """One file per row; folders made as needed. A path built by `probe_file` / `distractor_file` is written only
    if its real path (links followed) lies inside the folder it was built under (`BadFile` naming the entry)."""
    made: set[str] = set()
    for path, row in zip(paths, features):
        if isinstance(path, FeaturePath):
            inside(path.root, os.path.relpath(path, path.root), f"the MegaFace list entry {path.entry!r}")
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
        raise BadValue(f"{what}: not one readable feature file among {len(paths)} (first: {bad[0] if bad else '-'})")
    return out, valid


def distractor_writer(out: str, pack: Testpack, algo: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """A writer of distractor rows' devkit files: raw to <out>/feature_out, (R) to <out>/feature_out_clean."""
    extension = distractor_extension(pack.distractor_noise)

    def write(idx: np.ndarray, emb: np.ndarray) -> None:
        names = [pack.distractors[i] for i in idx]
        write_features([distractor_file(os.path.join(out, RAW_FOLDER), n, algo) for n in names], emb)
        write_features([distractor_file(os.path.join(out, CLEAN_FOLDER), n, algo) for n in names],
                       extend(emb, extension[idx]))

    return write


def write_probe_files(out: str, pack: Testpack, rows: np.ndarray, raw: np.ndarray, refined: np.ndarray,
                      algo: str) -> None:
    """The probe rows' devkit files: raw to <out>/feature_out, (R) to <out>/feature_out_clean."""
    names = [pack.probes[r] for r in rows]
    write_features([probe_file(os.path.join(out, RAW_FOLDER), n, algo) for n in names], raw)
    write_features([probe_file(os.path.join(out, CLEAN_FOLDER), n, algo) for n in names], extend(refined, 0.0))
