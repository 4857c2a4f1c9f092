"""insightface's `megaface_testpack_v1.0` layout, read as data; every name of it (the devkit's template lists'
included) is said here once.

    <root>/facescrub_images/<identity>/<file>       probes (aligned 112x112)
    <root>/megaface_images/<a1>/<a2>/<file>         distractors
    <root>/facescrub_lst                            lines '<identity>/<file>' (relative to facescrub_images)
    <root>/megaface_lst                             lines '<a1>/<a2>/<file>' (relative to megaface_images)
    <root>/facescrub_noises.txt                     file names; MegaFace (R) replaces their features
    <root>/megaface_noises.txt                      '<a1>/<a2>/<file>', optionally after a tab
    <templatelists>/facescrub_features_list.json    the devkit's probes: {"path": [...], "id": [...]}
    <templatelists>/megaface_features_list.json_<size>_<set>   the devkit's distractor sets: {"path": [...]}

Lines starting with `#` are comments. What is missing or does not match is said in one line each (`problems`)
and left out; the rest is still evaluated: a list that is missing is replaced by the images its folder holds,
a listed image that is missing is skipped, a noise line naming no listed image is counted. A list entry that leaves
its folder (a `..` component, an absolute path, a link leading out) is refused, `BadFile` naming the list, the line
and the entry; the file it points at is never opened. The template lists are read by `devkit_lists`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from elasticface.eval.identification.lists import numbered_lines, read_lines
from elasticface.utils.errors import BadFile, MissingPath

PROBE_DIR, DISTRACTOR_DIR = "facescrub_images", "megaface_images"
PROBE_LIST, DISTRACTOR_LIST = "facescrub_lst", "megaface_lst"
PROBE_NOISES, DISTRACTOR_NOISES = "facescrub_noises.txt", "megaface_noises.txt"
PROBE_TEMPLATES, DISTRACTOR_TEMPLATES = "facescrub_features_list.json", "megaface_features_list.json"


@dataclass
class Testpack:
    """The images of a testpack that exist, in list order, and which of them the noise lists name."""

    root: str
    probes: list[str]              # relative to facescrub_images
    identities: list[str]          # one per probe
    distractors: list[str]         # relative to megaface_images
    probe_noise: np.ndarray        # bool per probe
    distractor_noise: np.ndarray   # bool per distractor
    problems: list[str] = field(default_factory=list)

    @property
    def probe_dir(self) -> str:
        return os.path.join(self.root, PROBE_DIR)

    @property
    def distractor_dir(self) -> str:
        return os.path.join(self.root, DISTRACTOR_DIR)


def _inside(list_path: str, folder: str, image_dir: str, follow_links: bool) -> list[str]:
    """The entries of a list of images relative to `image_dir`; one that leaves it (an absolute path, a `..`
    component, or with `follow_links` a link leading out) is refused, BadFile naming the list, the line and the
    entry: the file it names is never opened."""
    real_dir = os.path.realpath(image_dir) if follow_links else ""
    entries = []
    for lineno, entry in numbered_lines(list_path):
        if "\0" in entry:
            raise BadFile(f"{list_path}:{lineno}: the entry {entry!r} holds a NUL character; expected a path")
        parts = entry.replace("\\", "/").split("/")
        leaves = entry.startswith(("/", "\\")) or os.path.isabs(entry) or ".." in parts
        if not leaves and follow_links:
            real = os.path.realpath(os.path.join(image_dir, entry))
            leaves = os.path.commonpath([real_dir, real]) != real_dir or real == real_dir
        if leaves:
            raise BadFile(f"{list_path}:{lineno}: the entry {entry!r} leaves {folder}/ (an absolute path, a '..' "
                          f"component or a link leading out of {image_dir}); expected a path inside it")
        entries.append(entry)
    return entries


def _walk(folder: str, depth: int) -> list[str]:
    """Relative paths of the files exactly `depth` folders down, sorted."""
    out = []
    for base, _, files in os.walk(folder):
        rel = os.path.relpath(base, folder)
        if (0 if rel == "." else rel.count(os.sep) + 1) == depth - 1:
            out += [os.path.join(rel, f).replace(os.sep, "/") for f in files]
    return sorted(out)


def _listed(root: str, list_name: str, folder: str, depth: int, problems: list[str], images: bool) -> list[str]:
    """The list's entries whose image exists (every entry when not `images`); the folder's images when the list
    is missing."""
    list_path, image_dir = os.path.join(root, list_name), os.path.join(root, folder)
    if not images:
        if not os.path.isfile(list_path):
            raise MissingPath(f"MegaFace testpack {root}: {list_name} not found; the features' file names "
                                    f"come from it")
        return _inside(list_path, folder, image_dir, follow_links=False)
    if not os.path.isdir(image_dir):
        raise MissingPath(f"MegaFace testpack {root}: no {folder}/ folder; expected insightface's "
                                f"megaface_testpack_v1.0 layout ({PROBE_DIR}/, {DISTRACTOR_DIR}/, {PROBE_LIST}, ...)")
    if not os.path.isfile(list_path):
        found = _walk(image_dir, depth)
        real_dir = os.path.realpath(image_dir)
        out = next((p for p in found if os.path.commonpath([real_dir, os.path.realpath(os.path.join(image_dir, p))])
                    != real_dir), None)
        if out is not None:
            raise BadFile(f"{image_dir}: {out!r} is a link that leaves {folder}/; expected the testpack's own images")
        problems.append(f"{list_path} missing: the {len(found)} images under {image_dir} used instead")
        return found
    listed = _inside(list_path, folder, image_dir, follow_links=True)
    present = [p for p in listed if os.path.isfile(os.path.join(image_dir, p))]
    if len(present) < len(listed):
        first = next(p for p in listed if not os.path.isfile(os.path.join(image_dir, p)))
        problems.append(f"{list_path}: {len(listed) - len(present)} of {len(listed)} listed images missing "
                        f"(skipped; first {os.path.join(image_dir, first)})")
    return present


def _noise_lines(path: str, problems: list[str]) -> list[str]:
    if not os.path.isfile(path):
        problems.append(f"{path} missing: MegaFace (R) refines nothing it would name")
        return []
    return read_lines(path)


def distractor_key(path: str) -> str:
    """'a1/a2/file', the name megaface_noises.txt and the devkit use for a distractor."""
    return "/".join(path.split("/")[-3:])


def read_testpack(root: str, images: bool = True) -> Testpack:
    """The testpack's probes (identity = the folder an image is in), distractors and noise flags; with
    `images=False` (features read from files) the lists as they are, images or not."""
    problems: list[str] = []
    probes = _listed(root, PROBE_LIST, PROBE_DIR, 2, problems, images)
    distractors = _listed(root, DISTRACTOR_LIST, DISTRACTOR_DIR, 3, problems, images)
    identities = [p.split("/")[-2] if "/" in p else "" for p in probes]
    # facescrub_noises.txt names files: a probe is noisy when its file name is listed (remove_noises.py's rule)
    probe_names = [p.split("/")[-1] for p in probes]
    noise = set(_noise_lines(os.path.join(root, PROBE_NOISES), problems))
    probe_noise = np.array([n in noise for n in probe_names], dtype=bool)
    _unmatched(noise - set(probe_names), os.path.join(root, PROBE_NOISES), "listed probe", problems)
    keys = [distractor_key(p) for p in distractors]
    noise = {line.split("\t")[-1].strip() for line in _noise_lines(os.path.join(root, DISTRACTOR_NOISES), problems)}
    distractor_noise = np.array([k in noise for k in keys], dtype=bool)
    _unmatched(noise - set(keys), os.path.join(root, DISTRACTOR_NOISES), "listed distractor", problems)
    return Testpack(root, probes, identities, distractors, probe_noise, distractor_noise, problems)


def _unmatched(names: set[str], path: str, what: str, problems: list[str]) -> None:
    if names:
        problems.append(f"{path}: {len(names)} noise line(s) name no {what} (ignored; e.g. {sorted(names)[0]})")
