"""IJB-B / IJB-C 1:1 template verification (the protocol of insightface's IJB evaluation), and the embedding
and templates that 1:N identification (`eval.identification.ijb_1n`) shares with it.

Expected layout (insightface's release of the IJB sets), with `target` IJBB or IJBC::

    <root>/<target>/meta/<target lower>_face_tid_mid.txt        image_name template_id media_id
    <root>/<target>/meta/<target lower>_template_pair_label.txt template_id1 template_id2 label
    <root>/<target>/meta/<target lower>_name_5pts_score.txt     image_name x1 y1 ... x5 y5 detector_score
    <root>/<target>/loose_crop/<image_name>

(`root` may also point at `<root>/<target>` itself.) Steps: each image is aligned to the ArcFace
5-point template (similarity transform, least squares by Umeyama's method; the 96x112 template shifted
by x + 8 for 112x112) and embedded with its horizontal flip (embeddings added); optionally each image
feature is multiplied by its detector score; features are averaged per media and the media averages
summed per template, then L2-normalised; a template pair's score is the cosine similarity. TAR at FAR
1e-6 ... 1e-1 is read from the ROC exactly as insightface's `eval_ijbc.py` reads it
(`elasticface.metrics.roc`), so the numbers are comparable with published IJB-B/C tables.

The alignment is `elasticface.align.template.norm_crop`, insightface's rule, shared with `elasticface-align`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from elasticface.align.template import align_face
from elasticface.eval.identification.lists import text_lines
from elasticface.metrics.roc import roc_curve, tar_at_fars
from elasticface.utils.progress import Progress
from elasticface.utils.errors import BadFile, BadValue, MissingPath


DEFAULT_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


# -- metadata ---------------------------------------------------------------------------------------------


def _read_columns(path: str, columns: int, what: str) -> list[list[str]]:
    if not os.path.isfile(path):
        raise MissingPath(f"IJB: {path} not found; expected {what}")
    rows = []
    for lineno, line in text_lines(path, what):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != columns:
            raise BadFile(f"{path}:{lineno}: expected {columns} columns ({what}), got {len(parts)}: "
                          f"{line.strip()[:120]!r}")
        rows.append(parts)
    if not rows:
        raise BadFile(f"{path}: empty; expected {what}")
    return rows


def _numbers(path: str, rows: list[list[str]], dtype: type, what: str) -> np.ndarray:
    """The rows' fields as numbers (integers of int64, or finite floats); BadFile naming the file and the row."""
    out = []
    for i, row in enumerate(rows, 1):
        try:
            values = np.array([int(v) if dtype is np.int64 else float(v) for v in row], dtype=dtype)
        except (ValueError, OverflowError) as err:
            raise BadFile(f"{path}: row {i} ({' '.join(row)[:120]!r}): {err}; expected {what}") from None
        if not np.isfinite(values).all():
            raise BadFile(f"{path}: row {i} ({' '.join(row)[:120]!r}) holds a value that is not finite; "
                          f"expected {what}")
        out.append(values)
    return np.stack(out)


def read_template_media(path: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`<target>_face_tid_mid.txt` -> (image names, template ids, media ids)."""
    what = "'image_name template_id media_id' lines"
    rows = _read_columns(path, 3, what)
    ids = _numbers(path, [r[1:] for r in rows], np.int64, what)
    return [r[0] for r in rows], ids[:, 0], ids[:, 1]


def read_template_pairs(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`<target>_template_pair_label.txt` -> (template ids 1, template ids 2, labels 0/1)."""
    what = "'template_id1 template_id2 label' lines"
    arr = _numbers(path, _read_columns(path, 3, what), np.int64, what)
    return arr[:, 0], arr[:, 1], arr[:, 2]


def read_landmarks(path: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`<target>_name_5pts_score.txt` -> (image names, landmarks [N, 5, 2], detector scores [N])."""
    what = "'image_name x1 y1 ... x5 y5 score' lines"
    rows = _read_columns(path, 12, what)
    values = _numbers(path, [r[1:] for r in rows], np.float64, what)
    return [r[0] for r in rows], values[:, :10].reshape(-1, 5, 2), values[:, 10]


@dataclass
class IJBMeta:
    target: str
    image_dir: str
    names: list[str]
    landmarks: np.ndarray
    scores: np.ndarray
    templates: np.ndarray
    medias: np.ndarray
    pair_t1: np.ndarray
    pair_t2: np.ndarray
    pair_labels: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)


def load_ijb_meta(root: str, target: str = "IJBC", pairs: bool = True) -> IJBMeta:
    """Read the three metadata files (the pair list only with `pairs`: 1:N reads its own lists); image rows
    follow the landmark file, joined to templates by name."""
    target = target.upper()
    if target not in ("IJBB", "IJBC"):
        raise BadValue(f"IJB target must be IJBB or IJBC, got {target!r}")
    base = root if os.path.isdir(os.path.join(root, "meta")) else os.path.join(root, target)
    meta = os.path.join(base, "meta")
    if not os.path.isdir(meta):
        raise MissingPath(
            f"IJB: no meta/ folder in {root} or {os.path.join(root, target)}; expected the insightface layout "
            f"<root>/{target}/meta/{target.lower()}_face_tid_mid.txt"
        )
    t = target.lower()
    names, landmarks, scores = read_landmarks(os.path.join(meta, f"{t}_name_5pts_score.txt"))
    tm_names, templates, medias = read_template_media(os.path.join(meta, f"{t}_face_tid_mid.txt"))
    if tm_names != names:
        position = {n: i for i, n in enumerate(tm_names)}
        missing = [n for n in names if n not in position]
        if missing or len(tm_names) != len(names):
            raise BadFile(
                f"{os.path.join(meta, f'{t}_face_tid_mid.txt')}: lists other images than "
                f"{os.path.join(meta, f'{t}_name_5pts_score.txt')} "
                f"({len(tm_names)} vs {len(names)}; e.g. {missing[:3]})"
            )
        order = np.array([position[n] for n in names])
        templates, medias = templates[order], medias[order]
    empty = np.zeros(0, dtype=np.int64)
    p1, p2, labels = read_template_pairs(os.path.join(meta, f"{t}_template_pair_label.txt")) if pairs else (empty,) * 3
    image_dir = os.path.join(base, "loose_crop")
    if not os.path.isdir(image_dir):
        raise MissingPath(f"IJB: image folder {image_dir} not found")
    return IJBMeta(target, image_dir, names, landmarks, scores, templates, medias, p1, p2, labels)


class IJBImages(Dataset):
    """Item i: (uint8 [3, S, S] RGB face i aligned with its landmarks, i)."""

    def __init__(self, image_dir: str, names: Sequence[str], landmarks: np.ndarray, image_size: int = 112) -> None:
        self.image_dir, self.names, self.landmarks, self.image_size = image_dir, list(names), landmarks, image_size

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        from PIL import Image

        path = os.path.join(self.image_dir, self.names[index])
        from elasticface.data.decode import MAX_PIXELS, refuse_too_large

        try:
            with Image.open(path) as im:  # reads the header only
                refuse_too_large(*im.size, MAX_PIXELS)
                rgb = im.convert("RGB")  # the full decode: a truncated or corrupt file fails here
        except FileNotFoundError:
            raise MissingPath(f"{path}: not found; the IJB meta files list it") from None
        except Exception as exc:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError, DecompressionBomb*, ...
            raise BadFile(f"{path}: not a readable image ({type(exc).__name__}: {exc})") from exc
        face = align_face(rgb, self.landmarks[index], self.image_size)
        return torch.from_numpy(np.asarray(face, dtype=np.uint8).copy()).permute(2, 0, 1), index


# -- templates and scores -----------------------------------------------------------------------------


def template_features(features: Any, templates: np.ndarray, medias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique template ids, L2-normalised template features): mean per (template, media), summed."""
    feats = torch.as_tensor(np.asarray(features), dtype=torch.float64)
    keys = np.stack([np.asarray(templates), np.asarray(medias)], 1)
    pairs, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = torch.from_numpy(inverse.reshape(-1))
    media_sum = torch.zeros(pairs.shape[0], feats.shape[1], dtype=torch.float64).index_add_(0, inverse, feats)
    counts = torch.bincount(inverse, minlength=pairs.shape[0]).to(torch.float64)
    media_mean = media_sum / counts[:, None]
    template_ids, t_inverse = np.unique(pairs[:, 0], return_inverse=True)
    tfeat = torch.zeros(template_ids.shape[0], feats.shape[1], dtype=torch.float64)
    tfeat.index_add_(0, torch.from_numpy(t_inverse.reshape(-1)), media_mean)
    tfeat = torch.nn.functional.normalize(tfeat, dim=1)
    return template_ids, tfeat.numpy()


def template_pair_scores(
    template_ids: np.ndarray, template_feats: np.ndarray, t1: np.ndarray, t2: np.ndarray, batch: int = 100_000
) -> np.ndarray:
    """Cosine similarity of every template pair (features already unit length), in batches."""
    i1, i2 = np.searchsorted(template_ids, t1), np.searchsorted(template_ids, t2)
    for ids, idx in ((t1, i1), (t2, i2)):
        bad = (idx >= template_ids.shape[0]) | (template_ids[np.minimum(idx, template_ids.shape[0] - 1)] != ids)
        if bad.any():
            raise BadValue(f"IJB: {int(bad.sum())} pair template ids have no images (e.g. {ids[bad][:3].tolist()})")
    scores = np.empty(t1.shape[0], dtype=np.float64)
    for s in range(0, t1.shape[0], batch):
        a, b = template_feats[i1[s : s + batch]], template_feats[i2[s : s + batch]]
        scores[s : s + batch] = np.einsum("ij,ij->i", a, b)
    return scores


def evaluate_ijb(
    model: Any,
    root: str,
    target: str = "IJBC",
    batch_size: int = 128,
    flip: bool = True,
    device: str | torch.device = "auto",
    num_workers: int = 0,
    use_detector_score: bool = True,
    normalize_images: bool = False,
    fars: Sequence[float] = DEFAULT_FARS,
    image_size: int = 112,
    verification: bool = True,
    identification: bool = False,
    fpirs: Sequence[float] = (0.01, 0.1),
) -> dict[str, Any]:
    """Embed, aggregate and score an IJB set: 1:1 (`verification`: `tar` ({key: TAR}), `scores`, `labels`, `roc`)
    and/or 1:N (`identification`: rank-N and TPIR at `fpirs`, `eval.identification.ijb_1n`) from one embedding pass."""
    from elasticface.eval.embedding_loop import embed_dataset

    meta = load_ijb_meta(root, target, pairs=verification)
    dataset = IJBImages(meta.image_dir, meta.names, meta.landmarks, image_size)
    templates = np.unique(meta.templates).shape[0]
    with Progress(f"IJB {meta.target}: embedding the images of {templates:,} templates", len(dataset)) as progress:
        emb, idx = embed_dataset(model, dataset, batch_size, flip, device, num_workers, progress.advance)
        progress.done()
    feats = emb[torch.argsort(idx)].double()
    if normalize_images:
        feats = torch.nn.functional.normalize(feats, dim=1)
    if use_detector_score:
        feats = feats * torch.from_numpy(meta.scores)[:, None]
    template_ids, tfeats = template_features(feats.numpy(), meta.templates, meta.medias)
    out: dict[str, Any] = {"num_images": len(dataset), "num_templates": int(template_ids.shape[0])}
    if verification:
        scores = template_pair_scores(template_ids, tfeats, meta.pair_t1, meta.pair_t2)
        labels = meta.pair_labels.astype(bool)
        roc = roc_curve(scores, labels)
        out.update(tar=tar_at_fars(roc[0], roc[1], fars), scores=scores, labels=labels, roc=roc,
                   num_pairs=int(labels.shape[0]))
    if identification:
        from elasticface.eval.identification.ijb_1n import identification as one_to_n

        out["identification"] = one_to_n(template_ids, tfeats, os.path.join(os.path.dirname(meta.image_dir), "meta"),
                                         meta.target, fpirs)
    return out
