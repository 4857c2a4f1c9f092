"""The same/different threshold eval.py measured for a model: `thresholds.json` in the eval run's own folder.

For every verification set eval.py scores, it records the protocol's threshold (the mean over the 10 folds of
the threshold chosen on the other 9, on the squared L2 distance of L2-normalised flip-fused embeddings) and
its cosine equivalent (distance d = 2 - 2 cos, so "same" when cos > 1 - d / 2), with the accuracy it gave.
The file goes where the run's other outputs go (results.json, the plots), never beside the model file: that
may be a repository, a shared model folder or a read-only mount. It names the model by path and SHA-256, so
`elasticface-compare` finds the thresholds of the same bytes among many runs (newest run first, per set), and
still reads `<model file>.thresholds.json`, where earlier versions wrote them.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from elasticface.utils.checksum import file_sha256
from elasticface.utils.errors import BadFile, BadValue

log = logging.getLogger(__name__)

RUN_FILE = "thresholds.json"
SUFFIX = ".thresholds.json"  # the old location, beside the model file: read, never written
PREFERRED_SET = "lfw"
DEFAULT_SEARCH = os.path.join("logs", "eval")  # eval.py's runs, under the folder a command starts in


@dataclass(frozen=True)
class Stored:
    """One file of thresholds: {set name: {"distance", "cosine", "acc", "pairs", "flip"}} and where it was."""

    path: str
    sets: dict[str, dict[str, Any]]
    sha256: str | None  # the model file's; None in the old files beside the weights

    @property
    def where(self) -> str:
        if self.sha256 is None:
            return "stored with the weights"
        return f"eval run {os.path.dirname(self.path) or '.'}"


def beside_weights(weights: str) -> str:
    return weights + SUFFIX


def _check_sets(path: str, sets: Any) -> dict[str, dict[str, Any]]:
    try:
        for entry in sets.values():
            if not math.isfinite(float(entry["cosine"])):
                raise ValueError(f"cosine {entry['cosine']!r}")
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise BadFile(f"{path}: expected {{set name: {{'cosine': number, ...}}}} as eval.py writes it "
                      f"({type(exc).__name__}: {exc})") from None
    return sets


def read_file(path: str) -> Stored:
    """A run's `thresholds.json` ({"weights", "sha256", "sets"}) or an old `<weights>.thresholds.json` (the sets
    alone); a file that is neither is an error naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, 4,300-digit numbers
        raise BadFile(f"{path}: not JSON ({type(exc).__name__}: {exc}); expected the thresholds eval.py "
                      f"writes") from exc
    if isinstance(table, dict) and "sets" in table and "sha256" in table:
        return Stored(path, _check_sets(path, table["sets"]), str(table["sha256"]))
    return Stored(path, _check_sets(path, table), None)


def store_thresholds(output_dir: str, weights: str, rows: list[dict[str, Any]], flip: bool) -> str | None:
    """Write the verification rows of an eval run ({"benchmark", "threshold", "acc", "pairs"}) to
    `output_dir/thresholds.json`; its path, or None (with a warning) when nothing could be written."""
    sets = {str(r["benchmark"]): {"distance": float(r["threshold"]), "cosine": 1.0 - float(r["threshold"]) / 2.0,
                                  "acc": float(r["acc"]), "pairs": int(r["pairs"]), "flip": bool(flip)}
            for r in rows if "threshold" in r}
    if not sets:
        return None
    path = os.path.join(output_dir, RUN_FILE)
    table = {"weights": os.path.abspath(weights), "sha256": file_sha256(weights), "sets": sets}
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(table, f, indent=2, sort_keys=True)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        log.warning("could not store the thresholds in the run's folder (%s): %s", path, exc)
        return None
    return path


def _run_files(search: str) -> list[str]:
    """`search` itself if it is a file, else every thresholds.json under it; newest first."""
    if os.path.isfile(search):
        return [search]
    found = glob.glob(os.path.join(glob.escape(search), "**", RUN_FILE), recursive=True)
    return sorted(found, key=lambda p: (os.path.getmtime(p), p), reverse=True)


def find_thresholds(weights: str, search: Iterable[str]) -> list[Stored]:
    """Every stored table for `weights`, the first to be used first: the runs' files under `search` that name
    the same bytes (newest first), then the old file beside the weights. A file named directly (not found in a
    folder) that was measured on other bytes is an error: it would give a threshold of another model."""
    digest: Callable[[], str] = functools.cache(lambda: file_sha256(weights))  # hashed once, only if needed
    tables: list[Stored] = []
    for place in search:
        direct = os.path.isfile(place)
        for path in _run_files(place):
            stored = read_file(path)
            if stored.sha256 is None:
                if direct:
                    tables.append(stored)
                continue
            if stored.sha256 == digest():
                tables.append(stored)
            elif direct:
                raise BadValue(f"{path}: measured on a model file with SHA-256 {stored.sha256[:12]}..., not on "
                                 f"{weights} ({digest()[:12]}...); expected the thresholds of that model")
    old = beside_weights(weights)
    if os.path.isfile(old):
        tables.append(read_file(old))
    return tables


def stored_threshold(weights: str, set_name: str | None = None,
                     search: Iterable[str] = (DEFAULT_SEARCH,)) -> tuple[float, str, str] | None:
    """(cosine threshold, which set, where it was stored) for `weights`: the named set, else lfw, else the only
    set stored; each set from the first table that holds it (`find_thresholds`). None when nothing is stored;
    a named set that is missing is an error naming the sets there are."""
    search = tuple(search)
    tables = find_thresholds(weights, search)
    first: dict[str, Stored] = {}
    for stored in tables:
        for name in stored.sets:
            first.setdefault(name, stored)
    if not first:
        if set_name is not None:
            raise BadValue(f"no thresholds stored for {weights} (searched {', '.join(search)} and "
                             f"{beside_weights(weights)}); run eval.py on set {set_name!r} first")
        return None
    if set_name is None:
        if PREFERRED_SET in first:
            set_name = PREFERRED_SET
        elif len(first) == 1:
            set_name = next(iter(first))
        else:
            raise BadValue(f"thresholds for {weights} are stored for {sorted(first)}: name one with --set")
    if set_name not in first:
        raise BadValue(f"no threshold for set {set_name!r} stored for {weights}; stored: {sorted(first)}")
    stored = first[set_name]
    return float(stored.sets[set_name]["cosine"]), set_name, stored.where
