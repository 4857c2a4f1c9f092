"""A MegaFace testpack in insightface's megaface_testpack_v1.0 layout, with devkit feature files or images, and
the devkit's protocol written out as plain loops (the oracle of tests/test_megaface.py)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from PIL import Image

EVAL_YAML = Path(__file__).resolve().parents[2] / "configs" / "eval.yaml"


def evaluate_pack(model, root, device="cpu", **keys):
    """`evaluate_megaface` with eval.py's settings, configs/eval.yaml's `megaface` node with root= and `keys` set (the
    node's names: sizes=, set=, features=, ...), its batch_size and flip, in-process (num_workers 0) on `device`."""
    from elasticface.eval.identification.megaface import MegafaceSettings, evaluate_megaface

    cfg = OmegaConf.load(EVAL_YAML)
    keys = {k: list(v) if isinstance(v, tuple) else v for k, v in keys.items()}
    settings = MegafaceSettings.from_config(OmegaConf.merge(cfg.megaface, {"root": str(root), **keys}))
    return evaluate_megaface(model, settings, 112, int(cfg.batch_size), bool(cfg.flip), device, 0)


def devkit_bytes(vector) -> bytes:
    """gen_megaface.py's write_bin: struct '4i' (len, 1, 4, 5) then '%df' of the values, x86 byte order."""
    values = [float(v) for v in vector]
    return struct.pack("<4i", len(values), 1, 4, 5) + struct.pack(f"<{len(values)}f", *values)


def probe_names(counts: dict[str, int]) -> list[str]:
    return [f"{ident}/{ident}_{k}.png" for ident, n in counts.items() for k in range(1, n + 1)]


def distractor_names(n: int) -> list[str]:
    return [f"{i % 7}/{i % 3}x{i % 7}@N00/{i}_0.jpg" for i in range(n)]


def write_lists(root, probes, distractors, probe_noises=(), distractor_noises=()) -> None:
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "facescrub_lst"), "w") as f:
        f.write("# probes\n" + "\n".join(probes) + "\n")
    with open(os.path.join(root, "megaface_lst"), "w") as f:
        f.write("\n".join(distractors) + "\n")
    with open(os.path.join(root, "facescrub_noises.txt"), "w") as f:
        f.write("#file names\n" + "".join(f"{n}\n" for n in probe_noises))
    with open(os.path.join(root, "megaface_noises.txt"), "w") as f:
        f.write("#a1/a2/file, some after a tab\n" + "".join(f"{k}\t{n}\n" for k, n in enumerate(distractor_noises)))


def write_feature_files(folder, probes, probe_feats, distractors, distractor_feats, algo="algo") -> None:
    """gen_megaface.py's output layout: facescrub/<id>/<file>_<algo>.bin, megaface/<a1>/<a2>/<file>_<algo>.bin."""
    for names, feats, kind, depth in ((probes, probe_feats, "facescrub", 2), (distractors, distractor_feats,
                                                                              "megaface", 3)):
        for name, f in zip(names, feats):
            parts = name.split("/")[-depth:]
            path = os.path.join(folder, kind, *parts[:-1], f"{parts[-1]}_{algo}.bin")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(devkit_bytes(f))


def write_templatelists(folder, probes, identities, distractor_sets: dict[int, list[str]], set_index=1) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "facescrub_features_list.json"), "w") as f:
        json.dump({"id": list(identities), "path": list(probes)}, f)
    for size, paths in distractor_sets.items():
        with open(os.path.join(folder, f"megaface_features_list.json_{size}_{set_index}"), "w") as f:
            json.dump({"path": list(paths)}, f)


def write_images(root, probes, distractors, colours) -> None:
    """112x112 JPEGs: each probe identity one colour (with noise), each distractor a colour of its own."""
    rng = np.random.default_rng(0)
    for folder, names in (("facescrub_images", probes), ("megaface_images", distractors)):
        for name in names:
            base = colours[name.split("/")[0]] if folder == "facescrub_images" else rng.integers(0, 255, 3)
            arr = np.clip(np.asarray(base, float) + rng.normal(0, 12, (112, 112, 3)), 0, 255).astype(np.uint8)
            path = os.path.join(root, folder, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Image.fromarray(arr).save(path, quality=95)


def devkit_oracle(probe_feats, identities, distractor_feats, max_rank=10):
    """The devkit's protocol as loops, float64, on vectors compared by L2 distance (any length): returns
    (CMC list, genuine scores, impostor scores) with scores = -squared distance. For each identity of at least two
    images, each image is a probe and each other image its mate; the mate ranks after every distractor at least
    as near as it is."""
    p = np.asarray(probe_feats, dtype=np.float64)
    d = np.asarray(distractor_feats, dtype=np.float64)
    ids = list(identities)
    ranks, genuine, impostor_probes = [], [], set()
    for i in range(len(p)):
        for j in range(len(p)):
            if i == j or ids[i] != ids[j]:
                continue
            mate = float(((p[i] - p[j]) ** 2).sum())
            nearer = sum(1 for x in d if float(((p[i] - x) ** 2).sum()) <= mate)
            ranks.append(nearer + 1)
            genuine.append(-mate)
            impostor_probes.add(i)
    impostors = [-float(((p[i] - x) ** 2).sum()) for i in sorted(impostor_probes) for x in d]
    cmc = [sum(r <= k for r in ranks) / len(ranks) for k in range(1, max_rank + 1)]
    return cmc, np.array(genuine), np.array(impostors)
