"""MegaFace and MegaFace (R) identification, the paper's Table IV, on insightface's `megaface_testpack_v1.0`.

Every image is embedded once (the verification sets' path: the image plus its flip, added, then L2-normalised
as gen_megaface.py does), or the features are read from gen_megaface.py's files (`features=`). Then, by the
devkit's protocol (`metrics.megaface`), for the raw features and for MegaFace (R) (`eval.megaface_refine`):
rank-1 against 10 ... 10^6 distractors and against every distractor the testpack holds, the CMC to rank 10 and
TAR at FAR 1e-6 ... 1e-3 against the largest requested set. Distractor sets are the devkit's lists
(`templatelists=`) or, without them, the first n of one permutation drawn by `seed` (so the sets are nested and
one pass over the distractors scores every size).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset

from elasticface.data.decode import CorruptImageError, DecodeStats, check_max_pixels, decode_image
from elasticface.eval import megaface_features as files
from elasticface.eval.megaface_refine import distractor_extension, extend, refine_probes
from elasticface.eval.megaface_testpack import Testpack, devkit_distractors, devkit_probes, read_testpack
from elasticface.metrics.megaface import ProbeView, cmc, mate_pairs, mate_scores, search_distractors
from elasticface.metrics.roc import far_key, impostors_to_keep, tar_at_fars_top
from elasticface.utils.errors import BadValue
from elasticface.utils.progress import Progress

log = logging.getLogger(__name__)

DEFAULT_SIZES = (10, 100, 1_000, 10_000, 100_000, 1_000_000)
DEFAULT_FARS = (1e-6, 1e-5, 1e-4, 1e-3)
VIEWS = ("raw", "refined")
EMBED_PIECE = 16_384  # images embedded per call, each piece stored (float16 by default) before the next


class TestpackImages(Dataset):
    """Item i: (uint8 [3, S, S] RGB of `root/paths[i]`, i), or (zeros, -1 - i) when the file is unreadable, so
    that one bad image among a million is counted and skipped instead of stopping the run. Decoded by the
    project's decoder with its pixel limit; faces of another size are resized and counted."""

    def __init__(self, root: str, paths: Sequence[str], image_size: int = 112, max_pixels: int | None = None) -> None:
        self.root, self.paths, self.image_size = root, list(paths), image_size
        self.max_pixels = check_max_pixels(max_pixels)
        self.stats = DecodeStats()  # one per dataset (per worker): a resize is logged at the 1st, 2nd, 4th ... time

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        try:
            with open(os.path.join(self.root, self.paths[index]), "rb") as f:
                data = f.read()
            return decode_image(data, image_size=self.image_size, stats=self.stats, max_pixels=self.max_pixels), index
        except (OSError, CorruptImageError):
            return torch.zeros(3, self.image_size, self.image_size, dtype=torch.uint8), -1 - index


def embed_images(model: Any, dataset: TestpackImages, dtype: torch.dtype, batch_size: int, flip: bool,
                 device: Any, num_workers: int,
                 on_piece: Callable[[np.ndarray, np.ndarray], None] | None = None) -> tuple[Tensor, np.ndarray]:
    """(L2-normalised features [N, D] of `dtype`, valid [N]), embedded EMBED_PIECE images at a time so that a
    million faces never sit in memory as float32; `on_piece(rows, float32 features)` sees each piece first. Says
    how far it is as the other embedding passes do (a line every tenth, at least every 30 s)."""
    from elasticface.eval.embedding_loop import embed_dataset

    out: Tensor | None = None
    valid = np.zeros(len(dataset), dtype=bool)
    with Progress(f"megaface: embedding the images under {dataset.root}", len(dataset)) as progress:
        for start in range(0, len(dataset), EMBED_PIECE):
            piece = Subset(dataset, range(start, min(start + EMBED_PIECE, len(dataset))))
            emb, idx = embed_dataset(model, piece, batch_size, flip, device, num_workers, progress=progress.advance)
            good = idx >= 0
            emb, idx = torch.nn.functional.normalize(emb[good], dim=1), idx[good].numpy()
            if out is None:
                out = torch.zeros(len(dataset), emb.shape[1], dtype=dtype)
            out[torch.from_numpy(idx)] = emb.to(dtype)
            valid[idx] = True
            if on_piece is not None and len(idx):
                on_piece(idx, emb.numpy())
        progress.done()
    if out is None:
        raise BadValue(f"no image to embed under {dataset.root}")
    return out, valid


@dataclass
class Pass:
    """One scan of the distractors: their rows in scan order, the counts after which ranks are read, and how
    many of the first rows are the verification set (0: none)."""

    order: np.ndarray
    checkpoints: list[int]
    verify_at: int = 0
    labels: dict[int, int] = field(default_factory=dict)  # checkpoint -> the distractor count it is reported as


def plan_passes(available: np.ndarray, sizes: Sequence[int], seed: int, lists: dict[int, np.ndarray],
                problems: list[str]) -> list[Pass]:
    """The scans that give every requested size (the devkit's list where given, else the first n of a permutation
    drawn by `seed`) and every available distractor. Verification is on the largest requested size, or on every
    distractor when a requested size is more than the testpack holds."""
    n = len(available)
    fits = sorted({int(s) for s in sizes if int(s) <= n})
    over = sorted({int(s) for s in sizes if int(s) > n})
    if over:
        problems.append(f"{', '.join(f'{s:,}' for s in over)} distractors requested; the testpack holds {n:,}: "
                        f"the largest available ({n:,}) is reported")
    verify = n if over or not fits else fits[-1]
    seeded = Pass(available[np.random.default_rng(seed).permutation(n)], [])
    passes = []
    for size in fits:
        rows = lists.get(size)
        if rows is None:
            seeded.checkpoints.append(size)
            seeded.labels[size] = size
            continue
        rows = rows[np.isin(rows, available)]
        if size == fits[-1]:  # the largest list's scan goes on over the rest: every distractor without a pass
            rest = np.setdiff1d(available, rows)
            passes.append(Pass(np.concatenate([rows, rest]), [len(rows), n], 0, {len(rows): size, n: n}))
        else:
            passes.append(Pass(rows, [len(rows)], 0, {len(rows): size}))
    if not any(n in p.checkpoints for p in passes) and n not in seeded.checkpoints:
        seeded.checkpoints.append(n)
        seeded.labels[n] = n
    if seeded.checkpoints:
        passes.insert(0, seeded)
    for p in passes:  # the one scan that reaches the verification set
        at = [cp for cp, label in p.labels.items() if label == verify]
        if at and not any(q.verify_at for q in passes):
            p.verify_at = at[0]
    if not any(p.verify_at for p in passes):  # a list that came out short of its size: its scan's first count
        passes[-1].verify_at = passes[-1].checkpoints[0]
    return passes


def _single_image_identities(identities: list[str], problems: list[str]) -> np.ndarray:
    """Probes to keep: those whose identity has another image (a mate), the others counted in one line."""
    ids, counts = np.unique(np.asarray(identities), return_counts=True)
    alone = set(ids[counts < 2])
    if alone:
        problems.append(f"{len(alone)} probe identit{'y has' if len(alone) == 1 else 'ies have'} one image and no "
                        f"mate (skipped, as the devkit does; e.g. {sorted(alone)[0]})")
    return np.array([i not in alone for i in identities], dtype=bool)


def evaluate_megaface(
    model: Any,
    root: str,
    sizes: Sequence[int] = DEFAULT_SIZES,
    fars: Sequence[float] = DEFAULT_FARS,
    seed: int = 0,
    templatelists: str | None = None,
    set_index: int = 1,
    max_rank: int = 10,
    chunk: int | None = None,
    dtype: str = "float16",
    features: str | None = None,
    algo: str = "elasticface",
    devkit_out: str | None = None,
    batch_size: int = 128,
    flip: bool = True,
    device: Any = "auto",
    num_workers: int = 0,
    image_size: int = 112,
) -> dict[str, Any]:
    """Both views' results ({'raw': ..., 'refined': ..., 'problems': [...], 'curves': ...}); see the module."""
    from elasticface.eval.embedding_loop import resolve_device

    device = resolve_device(device)
    store = {"float16": torch.float16, "float32": torch.float32}.get(str(dtype))
    if store is None:
        raise BadValue(f"megaface.dtype={dtype!r}: expected float16 or float32")
    pack = read_testpack(root, images=not features)
    problems = pack.problems
    if not pack.probes or not pack.distractors:
        raise BadValue(f"MegaFace testpack {root}: {len(pack.probes)} probes and {len(pack.distractors)} "
                         f"distractors found; both are needed")
    probe_feats, probe_ok, dist_feats, dist_ok = _features(model, pack, features, algo, devkit_out, store,
                                                           dict(batch_size=batch_size, flip=flip, device=device,
                                                                num_workers=num_workers), image_size, problems)
    rows, identities = _probes(pack, templatelists, probe_ok, problems)
    keep = _single_image_identities(identities, problems)
    rows, identities = rows[keep], [i for i, k in zip(identities, keep) if k]
    raw = probe_feats[rows].astype(np.float32)
    refined = refine_probes(raw, identities, pack.probe_noise[rows], seed, problems)
    if devkit_out:
        _write_probe_files(devkit_out, pack, rows, raw, refined, algo)
    available = np.flatnonzero(dist_ok)
    lists = {}
    if templatelists:
        for size in sizes:
            found = devkit_distractors(templatelists, int(size), set_index, pack, problems)
            if found is not None and int(size) <= len(available):
                lists[int(size)] = found
    passes = plan_passes(available, sizes, seed, lists, problems)
    return score_features(raw, refined, pack.probe_noise[rows], identities, dist_feats, pack.distractor_noise, passes,
                          fars, max_rank, chunk, device, problems)


def _features(model: Any, pack: Testpack, features: str | None, algo: str, devkit_out: str | None,
              store: torch.dtype, kw: dict, image_size: int, problems: list[str]) -> tuple:
    """(probe features float32 [P, D], valid, distractor features [N, D] of `store`, valid)."""
    if features:
        probe_paths = [files.probe_file(features, p, algo) for p in pack.probes]
        dist_paths = [files.distractor_file(features, d, algo) for d in pack.distractors]
        probe_feats, probe_ok = files.read_features(probe_paths, problems, f"{features}/facescrub")
        # written to devkit_out from the files' float32 values, then stored as `store`
        np_store = np.float16 if store == torch.float16 and not devkit_out else np.float32
        dist_feats, dist_ok = files.read_features(dist_paths, problems, f"{features}/megaface", np_store)
        if dist_feats.shape[1] != probe_feats.shape[1]:
            raise BadValue(f"{features}: probe features have {probe_feats.shape[1]} values, distractor features "
                             f"{dist_feats.shape[1]}")
        if devkit_out:
            rows = np.flatnonzero(dist_ok)
            _write_distractor_files(devkit_out, pack, algo)(rows, dist_feats[rows])
        return probe_feats, probe_ok, torch.from_numpy(dist_feats).to(store), dist_ok
    probes, probe_ok = embed_images(model, TestpackImages(pack.probe_dir, pack.probes, image_size), torch.float32,
                                    **kw)
    on_piece = _write_distractor_files(devkit_out, pack, algo) if devkit_out else None
    dists, dist_ok = embed_images(model, TestpackImages(pack.distractor_dir, pack.distractors, image_size), store,
                                  **kw, on_piece=on_piece)
    _count_unreadable(pack.probes, probe_ok, pack.probe_dir, problems)
    _count_unreadable(pack.distractors, dist_ok, pack.distractor_dir, problems)
    return probes.numpy(), probe_ok, dists, dist_ok


def _write_distractor_files(out: str, pack: Testpack, algo: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """A writer of distractor rows' devkit files: raw to <out>/feature_out, (R) to <out>/feature_out_clean."""
    extension = distractor_extension(pack.distractor_noise)

    def write(idx: np.ndarray, emb: np.ndarray) -> None:
        names = [pack.distractors[i] for i in idx]
        files.write_features([files.distractor_file(os.path.join(out, files.RAW_FOLDER), n, algo) for n in names], emb)
        files.write_features([files.distractor_file(os.path.join(out, files.CLEAN_FOLDER), n, algo) for n in names],
                             extend(emb, extension[idx]))

    return write


def _count_unreadable(paths: list[str], ok: np.ndarray, folder: str, problems: list[str]) -> None:
    if not ok.all():
        first = paths[int(np.flatnonzero(~ok)[0])]
        problems.append(f"{folder}: {int((~ok).sum())} of {len(paths)} images unreadable (skipped; first "
                        f"{os.path.join(folder, first)})")


def _probes(pack: Testpack, templatelists: str | None, ok: np.ndarray,
            problems: list[str]) -> tuple[np.ndarray, list[str]]:
    """(probe rows, identities): the devkit's probe list where given, else every listed probe; valid ones only."""
    listed = devkit_probes(templatelists, pack, problems) if templatelists else None
    rows, ids = listed if listed is not None else (list(range(len(pack.probes))), pack.identities)
    keep = [(r, i) for r, i in zip(rows, ids) if ok[r]]
    return np.array([r for r, _ in keep], dtype=np.int64), [i for _, i in keep]


def _write_probe_files(out: str, pack: Testpack, rows: np.ndarray, raw: np.ndarray, refined: np.ndarray,
                       algo: str) -> None:
    names = [pack.probes[r] for r in rows]
    files.write_features([files.probe_file(os.path.join(out, files.RAW_FOLDER), n, algo) for n in names], raw)
    files.write_features([files.probe_file(os.path.join(out, files.CLEAN_FOLDER), n, algo) for n in names],
                         extend(refined, 0.0))


def score_features(raw: np.ndarray, refined: np.ndarray, probe_noise: np.ndarray, identities: Sequence[str],
                   distractors: Tensor, distractor_noise: np.ndarray, passes: list[Pass],
                   fars: Sequence[float] = DEFAULT_FARS, max_rank: int = 10, chunk: int | None = None,
                   device: torch.device | str = "cpu", problems: list[str] | None = None) -> dict[str, Any]:
    """Both views scored by the passes' scans: probes' raw and (R) features float32 [P, D], the distractors'
    [N, D] (any float dtype); the result of `evaluate_megaface`."""
    device = torch.device(device)
    pairs = mate_pairs(identities)
    available = int(max(max(p.checkpoints) for p in passes))
    noisy = np.flatnonzero(probe_noise)
    stacked = torch.from_numpy(np.concatenate([raw, refined[noisy]]))
    refined_rows = torch.arange(len(raw))
    refined_rows[torch.from_numpy(noisy)] = torch.arange(len(raw), len(raw) + len(noisy))
    extra = torch.from_numpy(distractor_extension(distractor_noise) ** 2)
    views = [ProbeView(refined_rows, extra), ProbeView(torch.arange(len(raw)))]  # raw last: scored in place
    mates = {"raw": mate_scores(torch.from_numpy(raw), *pairs), "refined": mate_scores(torch.from_numpy(refined),
                                                                                       *pairs)}
    chunk = chunk or (65_536 if device.type == "cuda" else 8192)
    if device.type == "cuda":
        distractors = distractors.to(device)
    out: dict[str, Any] = {v: {"rank1": {}, "cmc": {}} for v in VIEWS}
    for p in passes:
        verify = p.verify_at
        keep = impostors_to_keep(len(raw) * verify, fars) if verify else 0
        start = time.perf_counter()
        found = search_distractors(stacked, views, distractors, torch.from_numpy(p.order), p.checkpoints,
                                   verify_at=verify, keep_impostors=keep, k=max_rank, chunk=chunk, device=device)
        log.info("megaface: %d probes against %d distractors (ranks at %s) in %.1f s on %s", len(raw), len(p.order),
                 ", ".join(str(c) for c in p.checkpoints), time.perf_counter() - start, device)
        for name, res in zip(("refined", "raw"), found):
            for at, top in res.top.items():
                rates = cmc(top, pairs[0], mates[name], max_rank)
                out[name]["rank1"][str(p.labels[at])] = rates[0]
                out[name]["cmc"][str(p.labels[at])] = rates
            if verify:
                tar, fpr, tpr = tar_at_fars_top(mates[name], res.impostors, res.num_impostors, fars)
                out[name].update(tar)
                out[name]["roc"] = (fpr, tpr)
                out[name]["verification_distractors"] = verify
                out[name]["impostor_pairs"] = int(res.num_impostors)
    summary = {"probes": len(raw), "identities": len(set(identities)), "mate_pairs": len(pairs[0]),
               "distractors": available, "noisy_probes": len(noisy),
               "noisy_distractors": int(distractor_noise.sum())}
    for name in VIEWS:
        out[name]["rank1"] = dict(sorted(out[name]["rank1"].items(), key=lambda kv: int(kv[0])))
        out[name]["cmc"] = dict(sorted(out[name]["cmc"].items(), key=lambda kv: int(kv[0])))
    out["summary"] = summary
    out["problems"] = problems if problems is not None else []
    return out


def table(result: dict[str, Any], fars: Sequence[float]) -> str:
    """The console's MegaFace table: rank-1 by distractor count, the CMC of the verification set, TAR at FAR."""
    counts = list(result["raw"]["rank1"])
    s = result["summary"]
    lines = [f"MegaFace (devkit protocol): {s['probes']:,} probes of {s['identities']} identities, "
             f"{s['mate_pairs']:,} (probe, mate) pairs, {s['distractors']:,} distractors "
             f"({s['noisy_probes']} probes and {s['noisy_distractors']} distractors on the noise lists)"]
    head = ["rank-1 %", *(f"{int(c):,}" for c in counts)]
    rows = [[("MegaFace" if v == "raw" else "MegaFace (R)"), *(f"{100 * result[v]['rank1'][c]:.2f}" for c in counts)]
            for v in VIEWS]
    lines += _aligned([head, *rows])
    verify = result["raw"].get("verification_distractors")
    if verify:
        cmc_row = result["raw"]["cmc"].get(str(verify), [])
        head = [f"CMC at {verify:,} %", *(f"r{k + 1}" for k in range(len(cmc_row)))]
        rows = [[("MegaFace" if v == "raw" else "MegaFace (R)"),
                 *(f"{100 * x:.2f}" for x in result[v]["cmc"][str(verify)])] for v in VIEWS]
        lines += _aligned([head, *rows])
        impostors = result["raw"].get("impostor_pairs", 0)
        beyond = [f for f in fars if f * impostors < 1]  # fewer impostor pairs than 1/FAR: no such threshold
        head = [f"TAR % at {verify:,}", *(f"FAR {f:.0e}" + ("*" if f in beyond else "") for f in fars)]
        rows = [[("MegaFace" if v == "raw" else "MegaFace (R)"), *(f"{100 * result[v][far_key(f)]:.2f}" for f in fars)]
                for v in VIEWS]
        lines += _aligned([head, *rows])
        if beyond:
            lines.append(f"* {impostors:,} impostor pairs, fewer than 1/FAR: the TAR is at a threshold of the highest "
                         "impostor score, not at that FAR")
    return "\n".join(lines)


def _aligned(cells: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in cells]
