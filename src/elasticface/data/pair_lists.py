"""Text lists of verification pairs: this package's ``path1 path2 0|1`` and LFW's own ``pairs.txt``.

LFW's ``pairs.txt`` (and ``pairsDevTrain.txt`` / ``pairsDevTest.txt``) is the benchmark's published form:

- a header: ``folds n`` (``10 300``: 10 folds, each n matched then n mismatched pairs), or a single ``n`` (the
  development lists: n matched then n mismatched);
- matched lines ``name n1 n2`` (two photos of one person), mismatched lines ``name1 n1 name2 n2``;
- photo ``n`` of ``name`` is ``<root>/<name>/<name>_<nnnn>.jpg`` (4 digits), the layout LFW ships and
  ``elasticface-align`` keeps (``.png`` and ``.jpeg`` are accepted where the aligned copy changed the suffix).

The order of the list is kept, so the 10 folds of the evaluation are LFW's own identity-disjoint folds.
Every error names the file and the line.
"""

from __future__ import annotations

import os
import re

__all__ = ["read_pair_list"]

_HEADER = re.compile(r"^\s*(\d+)(?:\s+(\d+))?\s*$")
_SUFFIXES = (".jpg", ".png", ".jpeg")


def _lines(path: str) -> list[tuple[int, str]]:
    """Non-empty lines that are not comments, with their 1-based line numbers."""
    try:
        with open(path, encoding="utf-8") as f:
            return [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip() and not line.startswith("#")]
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text pairs list ({err})") from err


def read_pair_list(pairs_file: str, image_root: str) -> tuple[list[str], list[bool]]:
    """``(paths, issame)`` of a pairs list: 2P image paths (pair i is ``paths[2i], paths[2i+1]``) and P labels.

    The format is told by the first line: an LFW header, or a ``path1 path2 0|1`` line (paths relative to
    ``image_root``). Every image must exist.
    """
    pairs_file, image_root = str(pairs_file), str(image_root)
    if not os.path.isfile(pairs_file):
        raise FileNotFoundError(f"pairs file {pairs_file} not found; expected lines 'path1 path2 0|1' or LFW's "
                                f"pairs.txt")
    lines = _lines(pairs_file)
    if lines and _HEADER.match(lines[0][1]):
        return _lfw(pairs_file, image_root, lines)
    return _plain(pairs_file, image_root, lines)


def _plain(pairs_file: str, image_root: str, lines: list[tuple[int, str]]) -> tuple[list[str], list[bool]]:
    paths: list[str] = []
    issame: list[bool] = []
    for lineno, line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[2] not in ("0", "1"):
            raise ValueError(f"{pairs_file}:{lineno}: expected 'path1 path2 0|1', got {line[:120]!r}")
        for p in parts[:2]:
            full = p if os.path.isabs(p) else os.path.join(image_root, p)
            if not os.path.isfile(full):
                raise FileNotFoundError(
                    f"{pairs_file}:{lineno}: image {full} not found (paths are relative to {image_root})"
                )
            paths.append(full)
        issame.append(parts[2] == "1")
    if not issame:
        raise ValueError(f"pairs file {pairs_file} lists no pairs; expected lines 'path1 path2 0|1'")
    return paths, issame


def _lfw_photo(pairs_file: str, lineno: int, image_root: str, name: str, number: str) -> str:
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"{pairs_file}:{lineno}: photo number {number!r} of {name} is not a positive integer")
    stem = os.path.join(image_root, name, f"{name}_{int(number):04d}")
    for suffix in _SUFFIXES:
        if os.path.isfile(stem + suffix):
            return stem + suffix
    raise FileNotFoundError(f"{pairs_file}:{lineno}: photo {stem}.jpg not found (LFW layout: "
                            f"<image_root>/<name>/<name>_<nnnn>.jpg, image_root {image_root})")


def _lfw(pairs_file: str, image_root: str, lines: list[tuple[int, str]]) -> tuple[list[str], list[bool]]:
    header = _HEADER.match(lines[0][1])
    assert header is not None
    folds, per_fold = (int(header.group(1)), int(header.group(2))) if header.group(2) else (1, int(header.group(1)))
    body = lines[1:]
    if len(body) != 2 * folds * per_fold:
        raise ValueError(
            f"{pairs_file}: the header '{lines[0][1]}' announces {folds} fold(s) of {per_fold} matched and {per_fold} "
            f"mismatched pairs ({2 * folds * per_fold} lines), but {len(body)} pair lines follow; the file is "
            f"truncated or not LFW's pairs.txt")
    paths: list[str] = []
    issame: list[bool] = []
    for position, (lineno, line) in enumerate(body):
        fold, within = divmod(position, 2 * per_fold)
        matched = within < per_fold
        parts = line.split()
        if matched and len(parts) == 3:
            name, first, second = parts
            paths += [_lfw_photo(pairs_file, lineno, image_root, name, first),
                      _lfw_photo(pairs_file, lineno, image_root, name, second)]
        elif not matched and len(parts) == 4:
            paths += [_lfw_photo(pairs_file, lineno, image_root, parts[0], parts[1]),
                      _lfw_photo(pairs_file, lineno, image_root, parts[2], parts[3])]
        else:
            want = "a matched pair 'name n1 n2'" if matched else "a mismatched pair 'name1 n1 name2 n2'"
            raise ValueError(f"{pairs_file}:{lineno}: expected {want} (fold {fold + 1}, pair {within + 1} of "
                             f"{2 * per_fold}), got {line[:120]!r}")
        issame.append(matched)
    return paths, issame
