"""IJB-B/C 1:N: the gallery and probe lists, joined to the 1:1 path's template features.

    <root>/<target>/meta/<target lower>_1N_gallery_G1.csv   (IJB-B's release: _S1.csv)   TEMPLATE_ID,SUBJECT_ID,...
    <root>/<target>/meta/<target lower>_1N_gallery_G2.csv   (_S2.csv)
    <root>/<target>/meta/<target lower>_1N_probe_mixed.csv

Each CSV has a header line, then one line per image; a template's subject is the one on its first line. The
gallery is G1 and G2 together (insightface's ijb_1n.py); templates are built exactly as for 1:1 (media means
summed, L2-normalised: `eval.ijb.template_features`). The rule: `gallery_search`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from elasticface.eval.identification.gallery_search import gallery_search
from elasticface.eval.identification.lists import text_lines
from elasticface.utils.errors import BadFile, BadValue, MissingPath


def read_template_subjects(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(template ids, subject ids), one per template in first-seen order, from a 1:N CSV."""
    if not os.path.isfile(path):
        raise MissingPath(f"IJB 1:N: {path} not found; expected a CSV 'TEMPLATE_ID,SUBJECT_ID,...' with a header")
    templates: dict[int, int] = {}
    for lineno, line in text_lines(path, "a CSV 'TEMPLATE_ID,SUBJECT_ID,...'"):
        parts = line.strip().split(",")
        if lineno == 1 or not parts[0]:  # the header
            continue
        try:
            t, s = int(parts[0]), int(parts[1])
            if not (-(1 << 63) <= t < 1 << 63 and -(1 << 63) <= s < 1 << 63):
                raise ValueError("out of the int64 range")
        except (ValueError, IndexError):
            raise BadFile(f"{path}:{lineno}: expected 'TEMPLATE_ID,SUBJECT_ID,...', got "
                          f"{line.strip()[:80]!r}") from None
        templates.setdefault(t, s)
    if not templates:
        raise BadFile(f"{path}: no templates listed")
    return np.array(list(templates), dtype=np.int64), np.array(list(templates.values()), dtype=np.int64)


def gallery_files(meta_dir: str, target: str) -> list[str]:
    """G1 and G2 (IJB-C's names), else S1 and S2 (IJB-B's), whichever the folder holds."""
    t = target.lower()
    for a, b in (("G1", "G2"), ("S1", "S2")):
        paths = [os.path.join(meta_dir, f"{t}_1N_gallery_{a}.csv"), os.path.join(meta_dir, f"{t}_1N_gallery_{b}.csv")]
        if all(os.path.isfile(p) for p in paths):
            return paths
    raise MissingPath(f"IJB 1:N: neither {t}_1N_gallery_G1.csv + _G2.csv nor _S1.csv + _S2.csv in {meta_dir}")


def identification(template_ids: np.ndarray, template_feats: np.ndarray, meta_dir: str, target: str,
                   fpirs: Sequence[float]) -> dict:
    """Rank-1/5/10 and TPIR at `fpirs` of the mixed probes against G1 + G2, and the counts; a probe whose subject
    has no gallery template, or a template without images, is left out and said in `problems`."""
    problems: list[str] = []
    g_ids, g_subjects = map(np.concatenate, zip(*(read_template_subjects(p) for p in gallery_files(meta_dir, target))))
    p_path = os.path.join(meta_dir, f"{target.lower()}_1N_probe_mixed.csv")
    p_ids, p_subjects = read_template_subjects(p_path)
    subjects, counts = np.unique(g_subjects, return_counts=True)
    if (counts > 1).any():
        raise BadValue(f"IJB 1:N: subject {subjects[counts > 1][0]} has {counts[counts > 1][0]} gallery templates; "
                         f"the 1:N protocol has one per subject")
    position = {int(t): i for i, t in enumerate(template_ids)}
    for ids, what in ((g_ids, "gallery"), (p_ids, "probe")):
        unknown = [int(t) for t in ids if int(t) not in position]
        if unknown:
            problems.append(f"{len(unknown)} {what} template(s) have no images in the face list (left out; "
                            f"e.g. {unknown[0]})")
    g_keep = np.array([int(t) in position for t in g_ids], dtype=bool)
    g_ids, g_subjects = g_ids[g_keep], g_subjects[g_keep]
    mate_of = {int(s): i for i, s in enumerate(g_subjects)}
    p_keep = np.array([int(t) in position and int(s) in mate_of for t, s in zip(p_ids, p_subjects)], dtype=bool)
    without = int(sum(int(s) not in mate_of for s in p_subjects))
    if without:
        problems.append(f"{p_path}: {without} probe template(s) whose subject has no gallery template (left out)")
    gallery = template_feats[[position[int(t)] for t in g_ids]]
    probes = template_feats[[position[int(t)] for t in p_ids[p_keep]]]
    mates = np.array([mate_of[int(s)] for s in p_subjects[p_keep]], dtype=np.int64)
    result = gallery_search(probes, mates, gallery, fpirs=fpirs)
    return {**result, "probes": int(p_keep.sum()), "gallery": int(len(g_ids)), "problems": problems}
