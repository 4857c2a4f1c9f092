"""Landmarks given in a file instead of detected: insightface's 5-point text format, a CSV, or a .npy array.

- `.txt` (insightface's `*_5pts*.txt`): `name x1 y1 x2 y2 x3 y3 x4 y4 x5 y5 [score]` per line.
- `.csv`: a header with `source` (or `path`) and `lm1_x, lm1_y, ..., lm5_x, lm5_y`; `faces.csv` written by
  `elasticface-align` is one, so its landmarks can be edited and fed back.
- `.npy`: float [N, 5, 2] (or [N, 10]) in the order of the photos' sorted relative paths (what the command
  lists); N must equal the number of photos.

Points are in insightface's order: left eye, right eye, nose tip, left and right mouth corner (image left first).
"""

from __future__ import annotations

import csv
import math
import os
from typing import Sequence

import numpy as np
from elasticface.utils.errors import BadFile, MissingPath

LANDMARK_COLUMNS = [f"lm{i}_{axis}" for i in range(1, 6) for axis in ("x", "y")]


def _points(values: Sequence[str], where: str) -> np.ndarray:
    try:
        points = np.array([float(v) for v in values], dtype=np.float64).reshape(5, 2)
    except (ValueError, TypeError) as exc:  # TypeError: a CSV row with fewer fields gives None
        raise BadFile(f"{where}: expected 10 numbers x1 y1 ... x5 y5 ({exc})") from None
    if not np.isfinite(points).all():
        raise BadFile(f"{where}: landmarks must be finite, got {list(values)}")
    return points


def _read_txt(path: str) -> dict[str, np.ndarray]:
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) not in (11, 12):
                    raise BadFile(f"{path}:{lineno}: expected 'name x1 y1 ... x5 y5 [score]' (11 or 12 fields), "
                                  f"got {len(parts)}")
                out[os.path.normpath(parts[0])] = _points(parts[1:11], f"{path}:{lineno}")
    except UnicodeDecodeError as err:
        raise BadFile(f"{path}: not UTF-8 text ({err}); expected 'name x1 y1 ... x5 y5 [score]' lines") from err
    return out


def _read_csv(path: str) -> dict[str, np.ndarray]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            name_key = "source" if "source" in fields else "path" if "path" in fields else None
            missing = [c for c in LANDMARK_COLUMNS if c not in fields]
            if name_key is None or missing:
                raise BadFile(f"{path}: a landmark CSV needs a 'source' (or 'path') column and {LANDMARK_COLUMNS}; "
                              f"missing {missing or ['source']}")
            out = {}
            for row in reader:
                lineno = reader.line_num
                if not row.get(name_key):
                    raise BadFile(f"{path}:{lineno}: no photo name in the '{name_key}' column")
                name = os.path.normpath(row[name_key])
                if name in out:  # several faces of one photo: the first row is the one used
                    continue
                out[name] = _points([row[c] for c in LANDMARK_COLUMNS], f"{path}:{lineno}")
    except (UnicodeDecodeError, csv.Error) as err:
        raise BadFile(f"{path}: not a CSV file this reader can parse ({type(err).__name__}: {err})") from err
    return out


def _read_npy(path: str) -> np.ndarray:
    """The array of a .npy landmark file, after its header: a real dtype, and a shape whose data the file holds
    (the header's shape never sizes an allocation the file does not back)."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version}")
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(f)
            offset = f.tell()
        if dtype.kind not in "fiu":
            raise ValueError(f"dtype {dtype}")
        if math.prod(shape) * dtype.itemsize != os.path.getsize(path) - offset:
            raise ValueError(f"a header of shape {shape} ({dtype}) over {os.path.getsize(path) - offset} data bytes")
        return np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - numpy's .npy reader raises many types (ValueError, EOFError, ...)
        raise BadFile(f"{path}: not a .npy of landmark numbers ({type(err).__name__}: {err}); expected float "
                      f"[N, 5, 2] as numpy.save writes it") from err


def read_landmark_file(path: str, photos: Sequence[str]) -> dict[str, np.ndarray]:
    """{relative photo path: [5, 2]} for the `photos` (relative paths) of the source folder.

    A file none of whose names is one of the photos is refused, naming an example of each; photos the file
    does not cover are simply absent (the command reports them)."""
    if not os.path.isfile(path):
        raise MissingPath(f"landmark file {path} not found")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npy":
        arr = _read_npy(path)
        if arr.ndim not in (2, 3) or arr.shape[1:] not in ((5, 2), (10,)) or len(arr) != len(photos):
            raise BadFile(f"{path}: a .npy of landmarks must be [N, 5, 2] or [N, 10] with N = {len(photos)} "
                             f"(the photos, in sorted path order), got {arr.shape}")
        return {name: _points(row.ravel(), f"{path}[{i}]") for i, (name, row) in enumerate(zip(photos, arr))}
    if ext == ".csv":
        table = _read_csv(path)
    elif ext == ".txt":
        table = _read_txt(path)
    else:
        raise BadFile(f"{path}: landmark files are .txt (insightface 5-point), .csv or .npy, not {ext!r}")
    wanted = {os.path.normpath(p): p for p in photos}
    found = {wanted[name]: points for name, points in table.items() if name in wanted}
    if table and not found:
        raise BadFile(f"{path}: none of its {len(table)} names is a photo of the source folder (e.g. "
                         f"{next(iter(table))!r} in the file, {photos[0] if photos else '<no photos>'!r} in the "
                         f"folder); names are paths relative to the source folder")
    return found
