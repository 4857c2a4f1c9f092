"""The same/different threshold stored with a model: `<weights file>.thresholds.json`, written by eval.py.

For every verification set eval.py scores, it records the protocol's threshold (the mean over the 10 folds of
the threshold chosen on the other 9, on the squared L2 distance of L2-normalised flip-fused embeddings) and
its cosine equivalent (distance d = 2 - 2 cos, so "same" when cos > 1 - d / 2), with the accuracy it gave.
`elasticface-compare` reads it back by set name. One file per model file, beside it; sets merge into it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

SUFFIX = ".thresholds.json"
PREFERRED_SET = "lfw"


def thresholds_path(weights: str) -> str:
    return weights + SUFFIX


def read_thresholds(weights: str) -> dict[str, dict[str, Any]]:
    """{set name: {"distance": d, "cosine": c, "acc": a, "pairs": n, "flip": bool}}; {} when none is stored."""
    path = thresholds_path(weights)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            table = json.load(f)
        for name, entry in table.items():
            float(entry["cosine"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: expected {{set name: {{'cosine': number, ...}}}} as eval.py writes it ({exc})")
    return table


def store_thresholds(weights: str, rows: list[dict[str, Any]], flip: bool) -> str | None:
    """Merge the verification rows of an eval run ({"benchmark", "threshold", "acc", "pairs"}) into the file
    beside `weights`; returns its path, or None (with a warning) when that folder is not writable."""
    entries = {str(r["benchmark"]): {"distance": float(r["threshold"]), "cosine": 1.0 - float(r["threshold"]) / 2.0,
                                     "acc": float(r["acc"]), "pairs": int(r["pairs"]), "flip": bool(flip)}
               for r in rows if "threshold" in r}
    if not entries:
        return None
    path = thresholds_path(weights)
    try:
        table = read_thresholds(weights)
    except ValueError:
        table = {}
    table.update(entries)
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(table, f, indent=2, sort_keys=True)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        log.warning("could not store the thresholds beside the model (%s): %s", path, exc)
        return None
    return path


def stored_threshold(weights: str, set_name: str | None = None) -> tuple[float, str] | None:
    """(cosine threshold, which set) stored for `weights`: the named set, else lfw, else the only set stored;
    None when nothing is stored. A named set that is missing is an error naming the sets there are."""
    table = read_thresholds(weights)
    if set_name is not None:
        if set_name not in table:
            raise ValueError(f"{thresholds_path(weights)}: no threshold for set {set_name!r}; stored: "
                             f"{sorted(table) or 'none (run eval.py on that set first)'}")
        return float(table[set_name]["cosine"]), set_name
    if PREFERRED_SET in table:
        return float(table[PREFERRED_SET]["cosine"]), PREFERRED_SET
    if len(table) == 1:
        name = next(iter(table))
        return float(table[name]["cosine"]), name
    if table:
        raise ValueError(f"{thresholds_path(weights)} holds thresholds for {sorted(table)}: name one with --set")
    return None
