"""A synthetic IJB-B/C directory (meta files, loose crops with landmarks) in insightface's layout."""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from PIL import Image
from torch import nn

from elasticface.align.template import align_face, arcface_template


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


def write_1n_lists(base, target="IJBC"):
    """insightface's 1:N lists for make_ijb's folder: gallery G1 = identities 0-1 and G2 = 2-3 (their first
    templates), mixed probes = every identity's second template, plus one probe whose subject (99) has no gallery
    template. Returns {probe template: subject} and {gallery template: subject}."""
    gallery = {10 * i + 1: i for i in range(4)}
    probes = {10 * i + 2: i for i in range(4)}
    t = target.lower()
    for name, rows in ((f"{t}_1N_gallery_G1.csv", {k: v for k, v in gallery.items() if v < 2}),
                       (f"{t}_1N_gallery_G2.csv", {k: v for k, v in gallery.items() if v >= 2}),
                       (f"{t}_1N_probe_mixed.csv", {**probes, 11: 99})):
        with open(os.path.join(base, "meta", name), "w") as f:
            f.write("TEMPLATE_ID,SUBJECT_ID,FILENAME\n")
            for tid, subject in rows.items():
                f.write(f"{tid},{subject},img/{tid}_a.jpg\n{tid},{subject},img/{tid}_b.jpg\n")
    return probes, gallery


class ColourEmbedder(nn.Module):
    def forward(self, x):
        return nn.functional.adaptive_avg_pool2d(x, 2).flatten(1) + 0.01 * x[:, :, :8, :8].flatten(1)[:, :12]


def reference_templates(base, target, model):
    """{template id: unit feature} by plain loops: each image aligned, embedded with its flip (added), times its
    detector score; images averaged per media, media summed per template, normalised."""
    meta = os.path.join(base, "meta")
    t = target.lower()
    lmk = {}
    for line in open(os.path.join(meta, f"{t}_name_5pts_score.txt")):
        p = line.split()
        lmk[p[0]] = (np.array(p[1:11], dtype=float).reshape(5, 2), float(p[11]))
    feats = {}
    for name, (points, score) in lmk.items():
        im = Image.open(os.path.join(base, "loose_crop", name)).convert("RGB")
        aligned = np.asarray(align_face(im, points), dtype=np.float32).copy()
        x = torch.from_numpy(aligned).permute(2, 0, 1)[None] / 127.5 - 1
        with torch.no_grad():
            f = model(x)[0].double() + model(x.flip(-1))[0].double()
        feats[name] = f.numpy() * score
    media = {}
    for line in open(os.path.join(meta, f"{t}_face_tid_mid.txt")):
        name, tid, mid = line.split()
        media.setdefault(int(tid), {}).setdefault(int(mid), []).append(feats[name])
    templates = {}
    for tid, ms in media.items():
        v = sum(np.mean(fs, axis=0) for fs in ms.values())
        templates[tid] = v / np.linalg.norm(v)
    return templates
