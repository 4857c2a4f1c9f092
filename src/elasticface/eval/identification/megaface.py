"""MegaFace and MegaFace (R) identification, the paper's Table IV, on insightface's `megaface_testpack_v1.0`.

Every image is embedded once (the verification sets' path: the image plus its flip, added, then L2-normalised
as gen_megaface.py does), or the features are read from gen_megaface.py's files (`features=`). Then, by the
devkit's protocol (`distractor_search`), for the raw features and for MegaFace (R) (`refine`): rank-1 against
10 ... 10^6 distractors and against every distractor the testpack holds, the CMC to rank 10 and TAR at FAR
1e-6 ... 1e-3 against the largest requested set. Distractor sets are the devkit's lists (`templatelists=`) or,
without them, the first n of one permutation drawn by `seed` (so the sets are nested and one pass over the
distractors scores every size: `planning`). Every setting comes from the `megaface` node of configs/eval.yaml,
the one place that holds their defaults (`MegafaceSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from elasticface.data.folder import ImageFiles
from elasticface.eval.identification import devkit_files as files
from elasticface.eval.identification.devkit_lists import devkit_distractors, devkit_probes
from elasticface.eval.identification.images import count_unreadable, embed_images
from elasticface.eval.identification.planning import plan_passes
from elasticface.eval.identification.refine import refine_probes
from elasticface.eval.identification.scoring import score_features
from elasticface.eval.identification.testpack import Testpack, read_testpack
from elasticface.utils.errors import BadValue


@dataclass(frozen=True)
class MegafaceSettings:
    """The `megaface` config node, read once: configs/eval.yaml holds every default, so no field has one here."""

    root: str
    templatelists: str | None
    set_index: int
    sizes: tuple[int, ...]
    seed: int
    fars: tuple[float, ...]
    max_rank: int
    chunk: int | None
    dtype: str
    features: str | None  # the folder of the raw feature files (`devkit_files.features_folder`)
    algo: str
    devkit_out: str | None

    @classmethod
    def from_config(cls, node: Mapping[str, Any]) -> MegafaceSettings:
        """From the `megaface` node (a DictConfig or a dict with its keys)."""
        def path(key: str) -> str | None:
            return str(node[key]) if node[key] else None

        return cls(root=str(node["root"]), templatelists=path("templatelists"), set_index=int(node["set"]),
                   sizes=tuple(int(s) for s in node["sizes"]), seed=int(node["seed"]),
                   fars=tuple(float(f) for f in node["fars"]), max_rank=int(node["max_rank"]),
                   chunk=None if node["chunk"] is None else int(node["chunk"]), dtype=str(node["dtype"]),
                   features=files.features_folder(str(node["features"])) if node["features"] else None,
                   algo=str(node["algo"]), devkit_out=path("devkit_out"))


def evaluate_megaface(model: Any, settings: MegafaceSettings, image_size: int, batch_size: int, flip: bool,
                      device: Any, num_workers: int) -> dict[str, Any]:
    """Both views' results ({'raw': ..., 'refined': ..., 'problems': [...], 'curves': ...}); see the module.
    `model` may be None when `settings.features` names the feature files."""
    from elasticface.eval.embedding_loop import resolve_device

    s = settings
    device = resolve_device(device)
    store = {"float16": torch.float16, "float32": torch.float32}.get(s.dtype)
    if store is None:
        raise BadValue(f"megaface.dtype={s.dtype!r}: expected float16 or float32")
    pack = read_testpack(s.root, images=not s.features)
    problems = pack.problems
    if not pack.probes or not pack.distractors:
        raise BadValue(f"MegaFace testpack {s.root}: {len(pack.probes)} probes and {len(pack.distractors)} "
                         f"distractors found; both are needed")
    probe_feats, probe_ok, dist_feats, dist_ok = _features(model, pack, s, store,
                                                           dict(batch_size=batch_size, flip=flip, device=device,
                                                                num_workers=num_workers), image_size, problems)
    rows, identities = _probes(pack, s.templatelists, probe_ok, problems)
    keep = _single_image_identities(identities, problems)
    rows, identities = rows[keep], [i for i, k in zip(identities, keep) if k]
    raw = probe_feats[rows].astype(np.float32)
    refined = refine_probes(raw, identities, pack.probe_noise[rows], s.seed, problems)
    if s.devkit_out:
        files.write_probe_files(s.devkit_out, pack, rows, raw, refined, s.algo)
    available = np.flatnonzero(dist_ok)
    lists = {}
    if s.templatelists:
        for size in s.sizes:
            found = devkit_distractors(s.templatelists, size, s.set_index, pack, problems)
            if found is not None and size <= len(available):
                lists[size] = found
    passes = plan_passes(available, s.sizes, s.seed, lists, problems)
    return score_features(raw, refined, pack.probe_noise[rows], identities, dist_feats, pack.distractor_noise, passes,
                          s.fars, s.max_rank, s.chunk, device, problems)


def _features(model: Any, pack: Testpack, s: MegafaceSettings, store: torch.dtype, kw: dict, image_size: int,
              problems: list[str]) -> tuple:
    """(probe features float32 [P, D], valid, distractor features [N, D] of `store`, valid)."""
    if s.features:
        probe_paths = [files.probe_file(s.features, p, s.algo) for p in pack.probes]
        dist_paths = [files.distractor_file(s.features, d, s.algo) for d in pack.distractors]
        probe_feats, probe_ok = files.read_features(probe_paths, problems, f"{s.features}/facescrub")
        # written to devkit_out from the files' float32 values, then stored as `store`
        np_store = np.float16 if store == torch.float16 and not s.devkit_out else np.float32
        dist_feats, dist_ok = files.read_features(dist_paths, problems, f"{s.features}/megaface", np_store)
        if dist_feats.shape[1] != probe_feats.shape[1]:
            raise BadValue(f"{s.features}: probe features have {probe_feats.shape[1]} values, distractor features "
                             f"{dist_feats.shape[1]}")
        if s.devkit_out:
            rows = np.flatnonzero(dist_ok)
            files.distractor_writer(s.devkit_out, pack, s.algo)(rows, dist_feats[rows])
        return probe_feats, probe_ok, torch.from_numpy(dist_feats).to(store), dist_ok
    probes, probe_ok = embed_images(model, ImageFiles(pack.probe_dir, pack.probes, image_size, skip_unreadable=True),
                                    torch.float32, **kw)
    on_piece = files.distractor_writer(s.devkit_out, pack, s.algo) if s.devkit_out else None
    dists, dist_ok = embed_images(model, ImageFiles(pack.distractor_dir, pack.distractors, image_size,
                                                    skip_unreadable=True), store, **kw, on_piece=on_piece)
    count_unreadable(pack.probes, probe_ok, pack.probe_dir, problems)
    count_unreadable(pack.distractors, dist_ok, pack.distractor_dir, problems)
    return probes.numpy(), probe_ok, dists, dist_ok


def _single_image_identities(identities: list[str], problems: list[str]) -> np.ndarray:
    """Probes to keep: those whose identity has another image (a mate), the others counted in one line."""
    ids, counts = np.unique(np.asarray(identities), return_counts=True)
    alone = set(ids[counts < 2])
    if alone:
        problems.append(f"{len(alone)} probe identit{'y has' if len(alone) == 1 else 'ies have'} one image and no "
                        f"mate (skipped, as the devkit does; e.g. {sorted(alone)[0]})")
    return np.array([i not in alone for i in identities], dtype=bool)


def _probes(pack: Testpack, templatelists: str | None, ok: np.ndarray,
            problems: list[str]) -> tuple[np.ndarray, list[str]]:
    """(probe rows, identities): the devkit's probe list where given, else every listed probe; valid ones only."""
    listed = devkit_probes(templatelists, pack, problems) if templatelists else None
    rows, ids = listed if listed is not None else (list(range(len(pack.probes))), pack.identities)
    keep = [(r, i) for r, i in zip(rows, ids) if ok[r]]
    return np.array([r for r, _ in keep], dtype=np.int64), [i for _, i in keep]
