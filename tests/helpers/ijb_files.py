"""A synthetic IJB-B/C directory (meta files, loose crops with landmarks) in insightface's layout."""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image

from elasticface.align.template import arcface_template


def similarity(scale, angle, tx, ty):
    c, s = scale * math.cos(angle), scale * math.sin(angle)
    return np.array([[c, -s, tx], [s, c, ty], [0, 0, 1.0]])


def apply_similarity(m, pts):
    return pts @ m[:2, :2].T + m[:2, 2]


COLOURS = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (200, 200, 40)]


def make_ijb(root, target="IJBC", seed=0):
    """4 identities x 2 templates x 2 media x 1-2 loose crops with a coloured 'face' and fake landmarks."""
    rng = np.random.default_rng(seed)
    base = os.path.join(root, target)
    os.makedirs(os.path.join(base, "meta"))
    os.makedirs(os.path.join(base, "loose_crop"))
    tid_lines, lmk_lines, template_identity = [], [], {}
    n = 0
    for ident, colour in enumerate(COLOURS):
        for t in range(2):
            tid = 10 * ident + t + 1
            template_identity[tid] = ident
            for m in range(2):
                mid = 100 * tid + m
                for _ in range(1 + (m + t) % 2):
                    n += 1
                    name = f"{n}.jpg"
                    size = (int(rng.integers(130, 180)), int(rng.integers(130, 180)))
                    face = similarity(
                        rng.uniform(0.9, 1.3), rng.uniform(-0.3, 0.3), rng.uniform(5, 15), rng.uniform(5, 15)
                    )
                    lm = apply_similarity(face, arcface_template(112))
                    arr = np.full((size[1], size[0], 3), 90, dtype=np.uint8)
                    arr[:, :, :] = np.clip(np.array(colour) + rng.normal(0, 25, 3), 0, 255).astype(np.uint8)
                    arr[: size[1] // 3] = rng.integers(0, 255, 3).astype(np.uint8)  # identity-unrelated clutter
                    Image.fromarray(arr).save(os.path.join(base, "loose_crop", name), quality=95)
                    tid_lines.append(f"{name} {tid} {mid}")
                    score = rng.uniform(0.5, 1.0)
                    lmk_lines.append(name + " " + " ".join(f"{v:.3f}" for v in lm.ravel()) + f" {score:.4f}")
    tids = sorted(template_identity)
    pair_lines = [
        f"{a} {b} {int(template_identity[a] == template_identity[b])}"
        for i, a in enumerate(tids)
        for b in tids[i + 1 :]
    ]
    t = target.lower()
    for fname, lines in (
        (f"{t}_face_tid_mid.txt", tid_lines),
        (f"{t}_name_5pts_score.txt", lmk_lines),
        (f"{t}_template_pair_label.txt", pair_lines),
    ):
        with open(os.path.join(base, "meta", fname), "w") as f:
            f.write("\n".join(lines) + "\n")
    return base
