"""TinyFace (Cheng et al., ACCV 2018): closed-set identification of low-resolution faces, scored as AdaFace does.

The release's test split, the layout read here (three folders, whatever holds them):

    <root>/Probe/<identity>_<n>.jpg                3,728 probes
    <root>/Gallery_Match/<identity>_<n>.jpg        4,443 images of the probes' 2,569 identities
    <root>/Gallery_Distractor/<anything>.jpg       153,428 faces of no one in the test

`<root>` is the folder given, else `aligned_pad_0.1_pad_high/` under it (AdaFace's MTCNN-aligned 112x112 copy,
preferred when present) or `tinyface/Testing_Set/` (the release's zip). A file's identity is its name's prefix
before the first `_`; distractors belong to no one. The rule (AdaFace's `validation_lq/tinyface_helper.py` and
CVLface's TinyFace evaluator, read from their code): inner products of the L2-normalised features of each probe
against the whole gallery (matches and distractors); a probe is found at rank k when an image of its identity is
among its k highest scores; rank-1, -5 and -20 and the CMC are the shares of probes found. A probe whose identity has
no gallery image is left out (their closed-set rule) and said. Where a gallery image ties the best mate's score, the
mate ranks first (AdaFace's reverse argsort leaves that order to numpy).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from elasticface.utils.errors import BadValue, MissingPath

if TYPE_CHECKING:
    import torch

PROBE_DIR, MATCH_DIR, DISTRACTOR_DIR = "Probe", "Gallery_Match", "Gallery_Distractor"
FOLDERS = (PROBE_DIR, MATCH_DIR, DISTRACTOR_DIR)
ALIGNED_COPY = "aligned_pad_0.1_pad_high"  # AdaFace's aligned copy, extracted beside the release
RELEASE = os.path.join("tinyface", "Testing_Set")


@dataclass
class TinyfaceSet:
    """The test split as read: image paths relative to `folder`, the identities of probes and matches."""

    folder: str
    probes: list[str]
    probe_ids: list[str]
    matches: list[str]
    match_ids: list[str]
    distractors: list[str]
    problems: list[str] = field(default_factory=list)


def find_folder(root: str) -> str:
    """The folder that holds Probe/, Gallery_Match/ and Gallery_Distractor/: `root`, its aligned copy, or the release's
    tinyface/Testing_Set/ under it."""
    if not os.path.isdir(root):
        raise MissingPath(f"tinyface.root={root}: not a folder; expected TinyFace's test split ({', '.join(FOLDERS)})")
    for folder in (root, os.path.join(root, ALIGNED_COPY), os.path.join(root, RELEASE)):
        if all(os.path.isdir(os.path.join(folder, f)) for f in FOLDERS):
            return folder
    missing = [f for f in FOLDERS if not os.path.isdir(os.path.join(root, f))]
    raise MissingPath(f"tinyface.root={root}: no {', '.join(f + '/' for f in missing)} there, nor under "
                      f"{ALIGNED_COPY}/ or {RELEASE}/; expected TinyFace's test split: {', '.join(FOLDERS)}")


def identity(name: str) -> str | None:
    """A file name's identity: its prefix before the first `_` (`1234_5.jpg` -> `1234`); None without one."""
    prefix, underscore, _ = os.path.basename(name).partition("_")
    return prefix if underscore and prefix else None


def _labelled(folder: str, sub: str, problems: list[str]) -> tuple[list[str], list[str]]:
    """(paths relative to `folder`, identities) of sub/'s images; names without an identity prefix are said and left
    out."""
    paths = _images(folder, sub)
    ids = [identity(p) for p in paths]
    unnamed = [p for p, i in zip(paths, ids) if i is None]
    if unnamed:
        problems.append(f"{os.path.join(folder, sub)}: {len(unnamed)} of {len(paths)} file names without an identity "
                        f"prefix '<identity>_' (left out; e.g. {os.path.basename(unnamed[0])})")
    kept = [(p, i) for p, i in zip(paths, ids) if i is not None]
    if not kept:
        raise BadValue(f"{os.path.join(folder, sub)}: no file name starts with an identity '<identity>_' "
                       f"(TinyFace names its faces <identity>_<n>.jpg)")
    return [p for p, _ in kept], [i for _, i in kept]


def _images(folder: str, sub: str) -> list[str]:
    from elasticface.data.folder import list_images

    try:
        return [os.path.join(sub, p) for p in list_images(os.path.join(folder, sub))]
    except MissingPath:
        raise _no_images(folder, sub) from None


def _no_images(folder: str, sub: str) -> BadValue:
    return BadValue(f"{os.path.join(folder, sub)}: no images; TinyFace's test split ranks every probe against the "
                    f"matches and the distractors, so each of {', '.join(FOLDERS)} holds faces")


def check_split(root: str) -> str:
    """The split's folder (`find_folder`), each of its three folders checked to hold an image: what eval.py's
    pre-check asks before a model loads (it stops at the first image of each)."""
    from elasticface.data.folder import IMAGE_EXTENSIONS

    folder = find_folder(root)
    for sub in FOLDERS:
        if not any(name.lower().endswith(IMAGE_EXTENSIONS)
                   for _, _, names in os.walk(os.path.join(folder, sub)) for name in names):
            raise _no_images(folder, sub)
    return folder


def read_tinyface(root: str) -> TinyfaceSet:
    """The test split under `root` (see the module): every probe with a gallery match, the matches, the distractors."""
    folder = find_folder(root)
    problems: list[str] = []
    probes, probe_ids = _labelled(folder, PROBE_DIR, problems)
    matches, match_ids = _labelled(folder, MATCH_DIR, problems)
    distractors = _images(folder, DISTRACTOR_DIR)
    gallery = set(match_ids)
    mated = [(p, i) for p, i in zip(probes, probe_ids) if i in gallery]
    if len(mated) < len(probes):
        alone = next(p for p, i in zip(probes, probe_ids) if i not in gallery)
        problems.append(f"{os.path.join(folder, PROBE_DIR)}: {len(probes) - len(mated)} probe(s) whose identity has "
                        f"no image in {MATCH_DIR}/ (left out, as the closed-set rule does; e.g. "
                        f"{os.path.basename(alone)})")
    if not mated:
        raise BadValue(f"{os.path.join(folder, PROBE_DIR)}: no probe's identity has an image in {MATCH_DIR}/")
    probes, probe_ids = [p for p, _ in mated], [i for _, i in mated]
    return TinyfaceSet(folder, probes, probe_ids, matches, match_ids, distractors, problems)


def mate_ranks(probes: torch.Tensor, probe_ids: Sequence[str], gallery: torch.Tensor, gallery_ids: Sequence[str | None],
               batch: int = 256) -> np.ndarray:
    """For each probe (unit rows), how many gallery images score strictly higher than its best-scoring mate (0: found
    at rank 1), `batch` probes at a time (TinyFace: 256 x 157,871 scores, 160 MB). Every probe has a mate in the
    gallery; `gallery_ids` is None for a distractor."""
    import torch

    names = {n: k for k, n in enumerate(sorted({i for i in gallery_ids if i is not None}))}
    gallery_labels = torch.tensor([names[i] if i is not None else -1 for i in gallery_ids])
    probe_labels = torch.tensor([names[i] for i in probe_ids])
    ranks = np.empty(len(probe_ids), dtype=np.int64)
    for start in range(0, len(probe_ids), batch):
        scores = probes[start:start + batch] @ gallery.T
        mate = probe_labels[start:start + batch, None] == gallery_labels[None, :]
        best_mate = scores.masked_fill(~mate, -float("inf")).amax(dim=1, keepdim=True)
        ranks[start:start + batch] = (scores > best_mate).sum(dim=1).numpy()
    return ranks


def cmc(ranks: np.ndarray, max_rank: int) -> list[float]:
    """The share of probes found within rank 1, 2, ..., max_rank."""
    return [float((ranks < k).mean()) for k in range(1, max_rank + 1)]


def evaluate_tinyface(model: Any, root: str, ranks: Sequence[int], image_size: int, batch_size: int, flip: bool,
                      device: Any, num_workers: int) -> dict[str, Any]:
    """{'rank1': %, 'rank5': %, ..., 'cmc': [% at rank 1 ... max(ranks)], the counts, 'problems': [...]}: each image
    embedded once (flip fused, L2-normalised), then `mate_ranks`."""
    import torch

    from elasticface.data.folder import ImageFiles
    from elasticface.eval.identification.images import count_unreadable, embed_images

    if not ranks or min(ranks) < 1:
        raise BadValue(f"tinyface.ranks={list(ranks)}: expected ranks of 1 or more, e.g. [1, 5, 20]")
    split = read_tinyface(root)
    problems = split.problems
    paths = split.probes + split.matches + split.distractors
    features, ok = embed_images(model, ImageFiles(split.folder, paths, image_size, skip_unreadable=True), torch.float32,
                                batch_size=batch_size, flip=flip, device=device, num_workers=num_workers,
                                what="tinyface")
    count_unreadable(paths, ok, split.folder, problems)
    p, m = len(split.probes), len(split.matches)
    gallery_ids = split.match_ids + [None] * len(split.distractors)
    in_gallery = ok[p:]
    gallery_ids = [i for i, k in zip(gallery_ids, in_gallery) if k]
    found = set(gallery_ids) - {None}
    mated = np.array([i in found for i in split.probe_ids], dtype=bool)
    if (ok[:p] & ~mated).any():  # an unreadable probe is counted above
        problems.append(f"{int((ok[:p] & ~mated).sum())} probe(s) left out: every gallery image of their identity "
                        f"was unreadable")
    keep = ok[:p] & mated
    if not keep.any():
        raise BadValue(f"{split.folder}: no probe left to search for (see the lines above)")
    found_at = mate_ranks(features[:p][torch.from_numpy(keep)], [i for i, k in zip(split.probe_ids, keep) if k],
                          features[p:][torch.from_numpy(in_gallery)], gallery_ids)
    curve = cmc(found_at, max(ranks))
    return {**{f"rank{k}": 100 * curve[k - 1] for k in ranks}, "cmc": [100 * c for c in curve],
            "probes": int(keep.sum()), "identities": len({i for i, k in zip(split.probe_ids, keep) if k}),
            "gallery_matches": int(in_gallery[:m].sum()), "distractors": int(in_gallery[m:].sum()),
            "images": split.folder, "problems": problems}
