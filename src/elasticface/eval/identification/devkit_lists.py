"""The MegaFace devkit's template lists (its probe list and distractor sets), read as data and matched to a testpack.

    <templatelists>/facescrub_features_list.json                {"path": [...], "id": [...]}: the probes
    <templatelists>/megaface_features_list.json_<size>_<set>   {"path": [...]}: a distractor set

A file that is not the JSON object expected is `BadFile` naming it; a listed image the testpack lacks is skipped and
counted in one line of `problems`.
"""

from __future__ import annotations

import json
import os

import numpy as np

from elasticface.eval.identification.testpack import DISTRACTOR_TEMPLATES, PROBE_TEMPLATES, Testpack, distractor_key
from elasticface.utils.errors import BadFile


def _read_json_paths(path: str, keys: tuple[str, ...]) -> dict[str, list]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, int digits: ValueErrors
        raise BadFile(f"{path}: not JSON text ({type(err).__name__}: {err}); expected the MegaFace devkit's "
                      f"template list") from err
    if not isinstance(data, dict) or any(not isinstance(data.get(k), list) for k in keys):
        raise BadFile(f"{path}: expected a JSON object with list(s) {', '.join(map(repr, keys))} "
                         f"(the MegaFace devkit's template list)")
    return data


def _match(paths: list[str], known: list[str], source: str, what: str, problems: list[str],
           key=lambda p: p) -> list[tuple[int, int]]:
    """(position in `paths`, row of `known`) for each devkit path found in the testpack: by its name, else by its
    name without the extension (the devkit's lists say .png where a testpack may hold .jpg)."""
    exact = {key(p): i for i, p in enumerate(known)}
    stem = {os.path.splitext(key(p))[0]: i for i, p in enumerate(known)}
    found, missing = [], []
    for j, p in enumerate(paths):
        i = exact.get(key(p), stem.get(os.path.splitext(key(p))[0]))
        (missing.append(p) if i is None else found.append((j, i)))
    if missing:
        problems.append(f"{source}: {len(missing)} of {len(paths)} {what} not in the testpack (skipped; "
                        f"first {missing[0]})")
    return found


def probe_key(path: str) -> str:
    """'identity/file', the name facescrub_lst and the devkit use for a probe."""
    return "/".join(path.split("/")[-2:])


def devkit_probes(templatelists: str, pack: Testpack, problems: list[str]) -> tuple[list[int], list[str]] | None:
    """(probe rows, identities) as the devkit's facescrub_features_list.json names them; None without it."""
    path = os.path.join(templatelists, PROBE_TEMPLATES)
    if not os.path.isfile(path):
        problems.append(f"{path} missing: every listed probe is used")
        return None
    data = _read_json_paths(path, ("path", "id"))
    if len(data["path"]) != len(data["id"]):
        raise BadFile(f"{path}: {len(data['path'])} paths but {len(data['id'])} ids")
    found = _match([str(p) for p in data["path"]], pack.probes, path, "probes", problems, key=probe_key)
    return [row for _, row in found], [str(data["id"][j]) for j, _ in found]


def devkit_distractors(templatelists: str, size: int, set_index: int, pack: Testpack,
                       problems: list[str]) -> np.ndarray | None:
    """Rows of the distractors `megaface_features_list.json_<size>_<set>` names; None without that file."""
    path = os.path.join(templatelists, f"{DISTRACTOR_TEMPLATES}_{size}_{set_index}")
    if not os.path.isfile(path):
        problems.append(f"{path} missing: {size} distractors drawn by the seed instead")
        return None
    paths = [str(p) for p in _read_json_paths(path, ("path",))["path"]]
    found = _match(paths, pack.distractors, path, "distractors", problems, key=distractor_key)
    return np.asarray([row for _, row in found], dtype=np.int64)
