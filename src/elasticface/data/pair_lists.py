"""Text lists of verification pairs: this package's ``path1 path2 0|1``, LFW's own ``pairs.txt`` and CFP's protocol.

LFW's ``pairs.txt`` (and ``pairsDevTrain.txt`` / ``pairsDevTest.txt``) is the benchmark's published form:

- a header: ``folds n`` (``10 300``: 10 folds, each n matched then n mismatched pairs), or a single ``n`` (the
  development lists: n matched then n mismatched);
- matched lines ``name n1 n2`` (two photos of one person), mismatched lines ``name1 n1 name2 n2``;
- photo ``n`` of ``name`` is ``<root>/<name>/<name>_<nnnn>.jpg`` (4 digits), the layout LFW ships and
  ``elasticface-align`` keeps (``.png`` and ``.jpeg`` are accepted where the aligned copy changed the suffix).

CFP (Sengupta et al., "Frontal to Profile Face Verification in the Wild", 2016) ships its protocol as a folder:

- ``Protocol/Pair_list_F.txt`` and ``Protocol/Pair_list_P.txt``: ``index path`` per line, the frontal and the
  profile photos, paths relative to ``Protocol/`` (``../Data/Images/001/frontal/01.jpg``);
- ``Protocol/Split/FP/01 .. 10/same.txt`` and ``diff.txt``: ``i,j`` per line, frontal photo i against profile
  photo j (350 of each per fold); ``Split/FF`` the same with two frontal photos.

Pass the split folder (``cfp-dataset/Protocol/Split/FP``) as the pairs file and the folder that holds the
photos in ``Data/Images``' layout (``<id>/frontal/01.jpg``; the original or an aligned copy) as the image root.

The order of the lists is kept (CFP: per fold its same pairs, then its different pairs), so the 10 folds of the
evaluation are the benchmarks' own identity-disjoint folds. Every error names the file and the line.

A photo the list names that is not under the image root is an error, unless the caller passes `skipped`: then
the pair is left out and one line naming the list's line and the photo is added to `skipped` (a .bin
converter counts them; the evaluation itself refuses, as fewer pairs is not the benchmark). When not one of
the photos is there, the image root is not in the list's layout, and that is an error either way.
"""

from __future__ import annotations

import os
import re
from elasticface.utils.errors import BadFile, MissingPath

__all__ = ["cfp_folds", "read_pair_list"]

_HEADER = re.compile(r"^\s*(\d{1,9})(?:\s+(\d{1,9}))?\s*$", re.ASCII)
_SUFFIXES = (".jpg", ".png", ".jpeg")


def _lines(path: str) -> list[tuple[int, str]]:
    """Non-empty lines that are not comments, with their 1-based line numbers."""
    try:
        with open(path, encoding="utf-8") as f:
            return [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip() and not line.startswith("#")]
    except UnicodeDecodeError as err:
        raise BadFile(f"{path}: not a text pairs list ({err})") from err


def _number(text: str) -> int | None:
    """A photo number or index as a list writes it (ASCII digits), else None (never int()'s 4,300-digit error)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def read_pair_list(pairs_file: str, image_root: str,
                   skipped: list[str] | None = None) -> tuple[list[str], list[bool]]:
    """``(paths, issame)`` of a pairs list: 2P image paths (pair i is ``paths[2i], paths[2i+1]``) and P labels.

    The format is told by the first line: an LFW header, or a ``path1 path2 0|1`` line (paths relative to
    ``image_root``); a CFP split folder (``Protocol/Split/FP``) is read as CFP's protocol. Every image must exist;
    with `skipped` given, a pair with a missing image is left out instead and its line appended to it.
    """
    pairs_file, image_root = str(pairs_file), str(image_root)
    lost: list[str] = []
    if os.path.isdir(pairs_file) and os.path.isfile(os.path.join(pairs_file, "01", "same.txt")):
        paths, issame = _cfp(pairs_file, image_root, lost)
    elif not os.path.isfile(pairs_file):
        raise MissingPath(f"pairs file {pairs_file} not found; expected lines 'path1 path2 0|1' or LFW's "
                                f"pairs.txt")
    else:
        lines = _lines(pairs_file)
        if lines and _HEADER.match(lines[0][1]):
            paths, issame = _lfw(pairs_file, image_root, lines, lost)
        else:
            paths, issame = _plain(pairs_file, image_root, lines, lost)
    if lost and not issame:
        raise MissingPath(f"{image_root}: not one photo of the {len(lost)} pairs {pairs_file} names is there "
                                f"(the first: {lost[0]}); is it the folder of these photos, in the list's layout?")
    if lost and skipped is None:
        raise MissingPath(lost[0])
    if skipped is not None:
        skipped.extend(lost)
    return paths, issame


def _pair(lost: list[str], paths: list[str], issame: list[bool], found: list[str | None], messages: list[str],
          same: bool) -> None:
    """Append the pair if both photos were found, else note the first missing photo's line in `lost`."""
    missing = [m for f, m in zip(found, messages) if f is None]
    if missing:
        lost.append(missing[0])
        return
    paths.extend(f for f in found if f is not None)
    issame.append(same)


def _plain(pairs_file: str, image_root: str, lines: list[tuple[int, str]],
           lost: list[str]) -> tuple[list[str], list[bool]]:
    paths: list[str] = []
    issame: list[bool] = []
    for lineno, line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[2] not in ("0", "1"):
            raise BadFile(f"{pairs_file}:{lineno}: expected 'path1 path2 0|1', got {line[:120]!r}")
        full = [p if os.path.isabs(p) else os.path.join(image_root, p) for p in parts[:2]]
        _pair(lost, paths, issame, [f if os.path.isfile(f) else None for f in full],
              [f"{pairs_file}:{lineno}: image {f} not found (paths are relative to {image_root})" for f in full],
              parts[2] == "1")
    if not issame and not lost:
        raise BadFile(f"{pairs_file}: lists no pairs; expected lines 'path1 path2 0|1'")
    return paths, issame


def _lfw_photo(pairs_file: str, lineno: int, image_root: str, name: str, number: str) -> tuple[str | None, str]:
    """The photo's path (None when it is missing) and the line that says it is missing."""
    if not _number(number):
        raise BadFile(f"{pairs_file}:{lineno}: photo number {number!r} of {name} is not a positive integer")
    stem = os.path.join(image_root, name, f"{name}_{int(number):04d}")
    return _existing(stem + ".jpg"), (f"{pairs_file}:{lineno}: photo {stem}.jpg not found (LFW layout: "
                                      f"<image_root>/<name>/<name>_<nnnn>.jpg, image_root {image_root})")


def _lfw(pairs_file: str, image_root: str, lines: list[tuple[int, str]],
         lost: list[str]) -> tuple[list[str], list[bool]]:
    header = _HEADER.match(lines[0][1])
    assert header is not None
    folds, per_fold = (int(header.group(1)), int(header.group(2))) if header.group(2) else (1, int(header.group(1)))
    body = lines[1:]
    if len(body) != 2 * folds * per_fold:
        raise BadFile(
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
            photos = [(parts[0], parts[1]), (parts[0], parts[2])]
        elif not matched and len(parts) == 4:
            photos = [(parts[0], parts[1]), (parts[2], parts[3])]
        else:
            want = "a matched pair 'name n1 n2'" if matched else "a mismatched pair 'name1 n1 name2 n2'"
            raise BadFile(f"{pairs_file}:{lineno}: expected {want} (fold {fold + 1}, pair {within + 1} of "
                             f"{2 * per_fold}), got {line[:120]!r}")
        found = [_lfw_photo(pairs_file, lineno, image_root, name, number) for name, number in photos]
        _pair(lost, paths, issame, [f for f, _ in found], [m for _, m in found], matched)
    return paths, issame


def _existing(stem_or_path: str) -> str | None:
    """The path itself if it exists, else the same stem with another image suffix (an aligned copy may be .png)."""
    if os.path.isfile(stem_or_path):
        return stem_or_path
    stem = os.path.splitext(stem_or_path)[0]
    return next((stem + s for s in _SUFFIXES if os.path.isfile(stem + s)), None)


def _cfp_photos(list_file: str, protocol: str, image_root: str) -> dict[int, str]:
    """``{index: photo path under image_root}`` of a CFP ``Pair_list_*.txt``."""
    if not os.path.isfile(list_file):
        raise MissingPath(f"{list_file} not found; a CFP split folder lies in <cfp>/Protocol/Split/<FP|FF>, "
                                f"beside Protocol/Pair_list_F.txt and Pair_list_P.txt")
    images = os.path.normpath(os.path.join(protocol, "..", "Data", "Images"))
    photos: dict[int, str] = {}
    for lineno, line in _lines(list_file):
        parts = line.split()
        if len(parts) != 2 or _number(parts[0]) is None:
            raise BadFile(f"{list_file}:{lineno}: expected 'index path', got {line[:120]!r}")
        relative = os.path.relpath(os.path.normpath(os.path.join(protocol, parts[1])), images)
        if relative.startswith(".."):
            raise BadFile(f"{list_file}:{lineno}: photo {parts[1]} is not under the dataset's Data/Images")
        photos[int(parts[0])] = os.path.join(image_root, relative)
    return photos


def cfp_folds(split_dir: str, image_root: str, lost: list[str]) -> list[list[tuple[str, str, bool]]]:
    """CFP's protocol folder (``Protocol/Split/FP`` or ``FF``) as its folds: per fold its same pairs, then its
    different pairs, each ``(photo1, photo2, same)`` with the photos under ``image_root``. A pair whose photo is
    not there is left out and the list's line naming it appended to ``lost``."""
    protocol = os.path.normpath(os.path.join(split_dir, "..", ".."))
    frontal_list = os.path.join(protocol, "Pair_list_F.txt")
    frontal = _cfp_photos(frontal_list, protocol, image_root)
    second_list = frontal_list if os.path.basename(os.path.normpath(split_dir)) == "FF" \
        else os.path.join(protocol, "Pair_list_P.txt")
    second = frontal if second_list == frontal_list else _cfp_photos(second_list, protocol, image_root)
    folds = sorted(d for d in os.listdir(split_dir) if d.isdigit())
    if folds != [f"{i:02d}" for i in range(1, len(folds) + 1)]:
        raise BadFile(f"{split_dir}: expected fold folders 01, 02, ... (CFP has 01 to 10), found {folds}")
    out: list[list[tuple[str, str, bool]]] = []
    for fold in folds:
        paths: list[str] = []
        issame: list[bool] = []
        for kind, same in (("same.txt", True), ("diff.txt", False)):
            list_path = os.path.join(split_dir, fold, kind)
            if not os.path.isfile(list_path):
                raise MissingPath(f"{list_path} not found; each CFP fold folder holds same.txt and diff.txt")
            for lineno, line in _lines(list_path):
                parts = [p.strip() for p in line.split(",")]
                if len(parts) != 2 or any(_number(p) is None for p in parts):
                    raise BadFile(f"{list_path}:{lineno}: expected 'i,j' (two photo indices), got {line[:120]!r}")
                sides = ((int(parts[0]), frontal, frontal_list), (int(parts[1]), second, second_list))
                for index, table, name in sides:
                    if index not in table:
                        raise BadFile(f"{list_path}:{lineno}: photo index {index} is not in {name}")
                _pair(lost, paths, issame, [_existing(table[index]) for index, table, _ in sides],
                      [f"{list_path}:{lineno}: photo {table[index]} not found ({name} names it as photo {index}; "
                       f"image root {image_root}, in the layout of CFP's Data/Images)" for index, table, name in sides],
                      same)
        out.append([(paths[2 * i], paths[2 * i + 1], same) for i, same in enumerate(issame)])
    return out


def _cfp(split_dir: str, image_root: str, lost: list[str]) -> tuple[list[str], list[bool]]:
    pairs = [pair for fold in cfp_folds(split_dir, image_root, lost) for pair in fold]
    if not pairs and not lost:
        raise BadFile(f"{split_dir}: the CFP split lists no pairs")
    return [path for a, b, _ in pairs for path in (a, b)], [same for _, _, same in pairs]
