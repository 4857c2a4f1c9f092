"""The LFW-style 1:1 verification protocol (10-fold accuracy, TAR at FAR) and its torchmetrics Metric.

The numbers have to be comparable with every published face-recognition table, so the protocol follows
insightface's `eval/verification.py` exactly (see REFERENCE.md):

- fused embeddings (image + flipped image) are L2-normalised; the score of a pair is the squared L2
  distance; a pair is predicted "same" when `distance < threshold` (strict);
- accuracy: thresholds `numpy.arange(0, 4, 0.01)`, 10 contiguous folds sized like sklearn's
  `KFold(10, shuffle=False)` (the first `P % 10` folds get one extra pair); on the 9 training folds the
  *first* threshold with the highest accuracy is chosen and applied to the held-out fold; we report the
  mean and the population standard deviation (ddof 0) of the 10 held-out accuracies and the mean of the
  10 chosen thresholds;
- TAR at FAR (insightface's `calculate_val`; training logs it as `val/<set>/tar_at_far_1e-3`):
  thresholds `numpy.arange(0, 4, 0.001)`; on the 9 training folds FAR(threshold) is computed for every
  threshold and inverted at the target FAR with `scipy.interpolate.interp1d(far, thresholds,
  kind="slinear")`; if the training folds never reach the target FAR the threshold is 0. The TAR of
  that threshold on the held-out fold is averaged over the 10 folds. The threshold is chosen on other
  folds than the ones it is scored on, so this is a held-out estimate, and a different number from the
  IJB-style TAR of `elasticface.metrics.roc`, which reads the ROC of all pairs.

  FAR repeats values (it is 0 for every small threshold), which current SciPy refuses ("Expect x to not
  have duplicates"; 1.9.3 already does). `far_threshold` returns, to the last bit, what the SciPy
  insightface was written against returns (checked against SciPy 1.6.1's interp1d on 21,000 cases).
  That is the line segment `numpy.interp` picks, with SciPy's rounding, and one real difference: a
  target equal to the largest FAR, first reached before the last threshold, gives threshold 0 (a
  degenerate last B-spline interval), where `numpy.interp` gives the last threshold.

Instead of looping over 400 (or 4,000) thresholds per fold, counts of genuine and impostor pairs below
every threshold come from `searchsorted` on the sorted distances, so a 6,000-pair set takes milliseconds.
Counts are integers and every accuracy is the same `int / int` division as the loop version, so the
results are bit-for-bit identical (tests/test_verification.py checks this against plain loops).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor
from pytorch_lightning.utilities import rank_zero_warn
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from elasticface.metrics.roc import as_numpy, far_key, roc_curve
from elasticface.utils.errors import BadValue

ACC_THRESHOLDS = np.arange(0, 4, 0.01)
VAL_THRESHOLDS = np.arange(0, 4, 0.001)


# Faces embedded at a time on a CPU, however large the loader's batch. A batch of 256 112x112 faces has activations of
# hundreds of MB per layer, far beyond the caches, and the allocator maps and unmaps them on every call (the system time
# of a CPU evaluation); 16 at a time keeps them in cache: MobileFaceNet y1, folded, 2.9x the faces/s of batch 256 on one
# thread and 2.5x on two, iresnet50 1.3x (benchmarks/bench_embedding.py; docs/speed.md).
CPU_MICRO_BATCH = 16


def flip_fused_embeddings(embed: Callable[[Tensor], Tensor], images: Tensor, flip: bool = True,
                          micro_batch: int | None = None) -> Tensor:
    """The protocol's embedding of a face: embed(x) + embed(flip(x)), raw, float32 (embed(x) without `flip`).

    `images` are scaled to [-1, 1] already and the model is in eval mode. Used by training validation,
    eval.py and `eval.embed` alike. Two forward passes, not one over the concatenated batch: the same
    result in eval mode, and faster on a CPU (iresnet_tiny: 2.2x at batch 64 measured on a quiet
    machine; 1.07x-1.13x at batch 64-128 on a loaded one). With `micro_batch`, `micro_batch` faces at a time
    (CPU_MICRO_BATCH on a CPU): in eval mode each face's embedding is its own, so only the speed changes.
    """
    if micro_batch is not None and len(images) > micro_batch:
        return torch.cat([flip_fused_embeddings(embed, part, flip) for part in images.split(micro_batch)])
    embeddings = embed(images).float()
    if flip:
        embeddings = embeddings + embed(images.flip(-1)).float()
    return embeddings


def check_pairs_for_folds(pair_sets: dict[str, Any], num_folds: int = 10) -> None:
    """Each set can carry the k-fold protocol: at least `num_folds` pairs, matched and mismatched among them (a
    threshold is chosen on the other folds' pairs of both kinds). Said in one line naming the set as soon as the sets
    are read, before any face is embedded (its users: the data module's setup and eval.py)."""
    for name, pairs in pair_sets.items():
        issame = np.asarray(pairs.issame, dtype=bool)
        matched = int(issame.sum())
        if issame.shape[0] < num_folds or matched == 0 or matched == issame.shape[0]:
            where = getattr(pairs, "source", None) or name
            raise BadValue(f"{where}: pair set '{name}' holds {issame.shape[0]} pairs ({matched} matched, "
                           f"{issame.shape[0] - matched} mismatched); the {num_folds}-fold protocol needs at least "
                           f"{num_folds} pairs, matched and mismatched both (LFW's has 6,000, half of each)")


def kfold_bounds(n: int, num_folds: int = 10) -> list[tuple[int, int]]:
    """[start, stop) of each contiguous fold, sized like sklearn's KFold(num_folds, shuffle=False)."""
    if num_folds < 2 or n < num_folds:
        raise ValueError(f"need at least num_folds={num_folds} >= 2 pairs, got {n}")
    sizes = np.full(num_folds, n // num_folds, dtype=np.int64)
    sizes[: n % num_folds] += 1
    stops = np.cumsum(sizes)
    return [(int(stop - size), int(stop)) for size, stop in zip(sizes, stops)]


def l2_normalize(x: Any) -> np.ndarray:
    """Rows scaled to unit L2 norm, in float64 (a zero row stays zero instead of becoming NaN)."""
    x = as_numpy(x)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    return x / np.maximum(norms, np.finfo(np.float64).tiny)[:, None]


def pair_distances(embeddings1: Any, embeddings2: Any) -> np.ndarray:
    """Squared L2 distance between the L2-normalised rows of two [P, D] embedding arrays (in [0, 4])."""
    e1, e2 = l2_normalize(embeddings1), l2_normalize(embeddings2)
    if e1.shape != e2.shape:
        raise ValueError(f"embeddings1 {e1.shape} and embeddings2 {e2.shape} must have the same shape")
    return np.sum(np.square(e1 - e2), axis=1)


def far_threshold(far: np.ndarray, thresholds: np.ndarray, far_target: float) -> float:
    """The threshold where FAR(threshold) reaches `far_target`: insightface's
    `interp1d(far, thresholds, kind="slinear")(far_target)` as older SciPy evaluates it (a degree-1
    B-spline on the knots `[far[0], *far, far[-1]]`), or 0 when `far` never reaches the target.

    `far` must be non-decreasing (it is, for ascending thresholds).
    """
    if far[-1] < far_target:
        return 0.0
    if far_target < far[0]:
        raise ValueError(f"far_target={far_target} is below the FAR of the smallest threshold ({far[0]}); "
                         "the thresholds must start where no impostor is accepted")
    # the B-spline's interval: the last knot <= target, but never the final one
    j = min(int(np.searchsorted(far, far_target, side="right")) - 1, far.shape[0] - 2)
    lo, hi = far[j], far[j + 1]
    if lo == hi:  # only when the target is the largest FAR, repeated at the end: SciPy returns 0
        return 0.0
    w = 1.0 / (hi - lo)
    return float(thresholds[j] * (w * (hi - far_target)) + thresholds[j + 1] * (w * (far_target - lo)))


def _counts_below(sorted_values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Number of values strictly below each threshold."""
    return np.searchsorted(sorted_values, thresholds, side="left")


def verification_scores(
    dist: Any,
    issame: Any,
    num_folds: int = 10,
    far_target: float = 1e-3,
    thresholds: np.ndarray | None = None,
    val_thresholds: np.ndarray | None = None,
) -> dict[str, Any]:
    """The 10-fold protocol on precomputed pair distances (smaller = more similar).

    Returns `acc`, `acc_std`, `threshold` (mean chosen threshold), per-fold `accuracies` and
    `best_thresholds`, `tar`/`tar_std`/`far` at `far_target` with per-fold `val_thresholds`, and the
    fold-averaged ROC `tpr`/`fpr` over `thresholds` (insightface's `calculate_roc` output).
    """
    dist = as_numpy(dist).reshape(-1)
    issame = as_numpy(issame, dtype=bool).reshape(-1)
    if dist.shape != issame.shape:
        raise ValueError(f"{dist.shape[0]} distances for {issame.shape[0]} pair labels")
    thresholds = ACC_THRESHOLDS if thresholds is None else np.asarray(thresholds, dtype=np.float64)
    if val_thresholds is None:
        val_thresholds = VAL_THRESHOLDS
    else:
        val_thresholds = np.asarray(val_thresholds, dtype=np.float64)
        if val_thresholds.shape[0] < 2 or np.any(np.diff(val_thresholds) <= 0):
            raise ValueError(
                "val_thresholds must be at least 2 strictly increasing values (FAR is inverted along them)"
            )
    folds = kfold_bounds(dist.shape[0], num_folds)

    def fold_counts(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per fold: genuine/impostor counts below each threshold, and genuine/impostor totals."""
        below_gen = np.empty((num_folds, grid.shape[0]), dtype=np.int64)
        below_imp = np.empty_like(below_gen)
        n_gen = np.empty(num_folds, dtype=np.int64)
        n_imp = np.empty(num_folds, dtype=np.int64)
        for k, (start, stop) in enumerate(folds):
            d, same = dist[start:stop], issame[start:stop]
            below_gen[k] = _counts_below(np.sort(d[same]), grid)
            below_imp[k] = _counts_below(np.sort(d[~same]), grid)
            n_gen[k], n_imp[k] = same.sum(), (~same).sum()
        return below_gen, below_imp, n_gen, n_imp

    # accuracy: tp = genuine below, tn = impostors not below
    tp, fp, n_gen, n_imp = fold_counts(thresholds)
    tn = n_imp[:, None] - fp
    fn = n_gen[:, None] - tp
    tp_all, tn_all = tp.sum(0), tn.sum(0)
    n_all = dist.shape[0]
    accuracies = np.zeros(num_folds)
    best_thresholds = np.zeros(num_folds)
    for k, (start, stop) in enumerate(folds):
        n_train = n_all - (stop - start)
        acc_train = (tp_all - tp[k] + tn_all - tn[k]) / n_train
        best = int(np.argmax(acc_train))
        best_thresholds[k] = thresholds[best]
        accuracies[k] = (tp[k, best] + tn[k, best]) / (stop - start)
    with np.errstate(invalid="ignore", divide="ignore"):
        tprs = np.where(n_gen[:, None] > 0, tp / np.maximum(tp + fn, 1), 0.0)
        fprs = np.where(n_imp[:, None] > 0, fp / np.maximum(fp + tn, 1), 0.0)

    # TAR at FAR: invert FAR(threshold) of the training folds, apply to the held-out fold
    vtp, vfp, _, _ = fold_counts(val_thresholds)
    vfp_all = vfp.sum(0)
    n_imp_all = n_imp.sum()
    tars = np.zeros(num_folds)
    fars = np.zeros(num_folds)
    fold_val_thresholds = np.zeros(num_folds)
    for k, (start, stop) in enumerate(folds):
        far_train = (vfp_all - vfp[k]) / max(n_imp_all - n_imp[k], 1)
        threshold = far_threshold(far_train, val_thresholds, far_target)
        fold_val_thresholds[k] = threshold
        d, same = dist[start:stop], issame[start:stop]
        accept = d < threshold
        tars[k] = np.sum(accept & same) / max(int(n_gen[k]), 1)
        fars[k] = np.sum(accept & ~same) / max(int(n_imp[k]), 1)

    return {
        "acc": float(np.mean(accuracies)),
        "acc_std": float(np.std(accuracies)),
        "threshold": float(np.mean(best_thresholds)),
        "accuracies": accuracies,
        "best_thresholds": best_thresholds,
        "tar": float(np.mean(tars)),
        "tar_std": float(np.std(tars)),
        "far": float(np.mean(fars)),
        "far_target": far_target,
        "val_thresholds": fold_val_thresholds,
        "tpr": tprs.mean(0),
        "fpr": fprs.mean(0),
        "thresholds": thresholds,
    }


def evaluate_verification(
    embeddings1: Any, embeddings2: Any, issame: Any, num_folds: int = 10, far_target: float = 1e-3
) -> dict[str, Any]:
    """The protocol on fused embeddings of the first and second image of every pair ([P, D] each)."""
    return verification_scores(pair_distances(embeddings1, embeddings2), issame, num_folds, far_target)


class VerificationAccuracy(Metric):
    """10-fold verification accuracy of one pair set, accumulated over (possibly distributed) batches.

    `update(embeddings, indices)` takes flip-fused, unnormalised embeddings and their image indices in
    the pair set; states are concatenated across ranks, so duplicates from a padding
    `DistributedSampler` are dropped in `compute` and every image must have been seen at least once.
    Call `update` and `compute`, not `forward` (a single batch is not a pair set).

    `compute` returns float64 scalars `acc`, `acc_std`, `threshold`, `tar_at_far_1e-3` (key follows
    `far_target`) and `xnorm`: the mean L2 norm of the flip-fused embeddings. insightface's `XNorm`
    averages the norms of the unfused embeddings of the images and their flips instead, so ours is
    up to twice as large (exactly twice when an image and its flip embed alike).
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, issame: Sequence[bool] | np.ndarray | Tensor, num_folds: int = 10, far_target: float = 1e-3,
                 allow_partial: bool = False, image_of: np.ndarray | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.issame = as_numpy(issame, dtype=bool).reshape(-1)
        # a pair set's `image_of` (data/pairs.py): only its distinct images need embedding, each stored image
        # takes the embedding of its first copy
        self.image_of = None if image_of is None else np.asarray(image_of, dtype=np.int64).reshape(-1)
        if self.image_of is not None and self.image_of.shape[0] != self.num_images:
            raise ValueError(f"image_of has {self.image_of.shape[0]} entries for {self.num_images} images")
        self.num_folds = num_folds
        self.far_target = far_target
        # partial validation (fast_dev_run, overfit_batches, limit_val_batches) scores the complete pairs it has
        self.allow_partial = allow_partial
        kfold_bounds(self.issame.shape[0], num_folds)  # fail early on sets smaller than num_folds
        self.add_state("embeddings", default=[], dist_reduce_fx="cat")
        self.add_state("indices", default=[], dist_reduce_fx="cat")
        self._result_cache: dict[str, Any] | None = None

    @property
    def num_images(self) -> int:
        return 2 * int(self.issame.shape[0])

    def update(self, embeddings: Tensor, indices: Tensor) -> None:
        if embeddings.ndim != 2 or indices.ndim != 1 or embeddings.shape[0] != indices.shape[0]:
            raise ValueError(f"expected embeddings [N, D] and indices [N], got {tuple(embeddings.shape)} "
                             f"and {tuple(indices.shape)}")
        self._result_cache = None
        self.embeddings.append(embeddings.detach().float())
        self.indices.append(indices.detach().long().to(embeddings.device))

    def _gathered(self) -> dict[str, Any]:
        """Sorted, de-duplicated fused embeddings of all 2P images and the protocol on them (cached)."""
        if self._result_cache is not None:
            return self._result_cache
        if isinstance(self.indices, list) and not self.indices:
            raise RuntimeError("VerificationAccuracy: no embeddings were added; call update() before compute()")
        emb = dim_zero_cat(self.embeddings).detach().double().cpu().numpy()
        idx = dim_zero_cat(self.indices).detach().cpu().numpy().astype(np.int64)
        unique, first = np.unique(idx, return_index=True)
        n = self.num_images
        if unique.shape[0] and (unique[0] < 0 or unique[-1] >= n):
            raise ValueError(f"VerificationAccuracy: image indices must lie in [0, {n}), "
                             f"got min {unique[0]} max {unique[-1]}")
        issame = self.issame
        emb = emb[first]  # np.unique sorts, so row i is image unique[i]
        if self.image_of is not None:
            row = np.full(n, -1, dtype=np.int64)
            row[unique] = np.arange(unique.shape[0])
            rows = row[self.image_of]
            unique = np.flatnonzero(rows >= 0)
            emb = emb[rows[unique]]
        if unique.shape[0] != n:
            missing = np.setdiff1d(np.arange(n), unique)
            if not self.allow_partial:
                raise ValueError(
                    f"VerificationAccuracy: {missing.shape[0]} of {n} images of the pair set were never embedded "
                    f"(first missing indices {missing[:10].tolist()}); "
                    f"every image 0..{n - 1} must be passed to update()"
                )
            return self._partial(emb, unique)
        self._result_cache = self._evaluate(emb, issame)
        return self._result_cache

    def _partial(self, emb: np.ndarray, unique: np.ndarray) -> dict[str, Any]:
        """The protocol on the pairs whose two images were both embedded; NaN when fewer than num_folds."""
        seen = np.zeros(self.num_images, dtype=bool)
        seen[unique] = True
        complete = seen[0::2] & seen[1::2]
        total = int(self.issame.shape[0])
        if int(complete.sum()) < self.num_folds:
            rank_zero_warn(f"VerificationAccuracy: only {int(complete.sum())} of {total} pairs complete "
                           f"(partial validation); at least {self.num_folds} are needed, reporting NaN")
            self._result_cache = dict.fromkeys(("acc", "acc_std", "threshold", "tar", "xnorm"), float("nan"))
            return self._result_cache
        rank_zero_warn(f"VerificationAccuracy: partial validation scores {int(complete.sum())} of {total} pairs")
        row = np.full(self.num_images, -1, dtype=np.int64)
        row[unique] = np.arange(unique.shape[0])
        pairs = np.flatnonzero(complete)
        rows = np.stack([row[2 * pairs], row[2 * pairs + 1]], axis=1).reshape(-1)
        self._result_cache = self._evaluate(emb[rows], self.issame[pairs])
        return self._result_cache

    def _evaluate(self, emb: np.ndarray, issame: np.ndarray) -> dict[str, Any]:
        result = evaluate_verification(emb[0::2], emb[1::2], issame, self.num_folds, self.far_target)
        result["xnorm"] = float(np.mean(np.linalg.norm(emb, axis=1)))
        cos = 1.0 - pair_distances(emb[0::2], emb[1::2]) / 2.0
        result["genuine"] = cos[issame]
        result["impostor"] = cos[~issame]
        result["roc"] = roc_curve(cos, issame)
        return result

    def compute(self) -> dict[str, Tensor]:
        r = self._gathered()
        keys = {"acc": "acc", "acc_std": "acc_std", "threshold": "threshold", far_key(self.far_target): "tar",
                "xnorm": "xnorm"}
        # float64 so that the logged numbers are exactly the protocol's, not rounded to float32
        return {name: torch.tensor(r[key], dtype=torch.float64) for name, key in keys.items()}

    def roc_data(self) -> dict[str, np.ndarray]:
        """Curves for plots: full ROC over all pairs (`fpr`, `tpr`, `thresholds` on cosine similarity),
        insightface's fold-averaged ROC (`fold_fpr`, `fold_tpr`), and cosine similarities of `genuine`
        and `impostor` pairs. Under DDP every rank must call it (it gathers the states)."""
        if self._result_cache is None:
            with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self._to_sync,
                                   should_unsync=self._should_unsync):
                r = self._gathered()
        else:
            r = self._result_cache
        if "roc" not in r:
            raise ValueError("too few complete pairs in a partial validation for a ROC")
        fpr, tpr, thresholds = r["roc"]
        return {
            "fpr": fpr,
            "tpr": tpr,
            "thresholds": thresholds,
            "fold_fpr": r["fpr"],
            "fold_tpr": r["tpr"],
            "genuine": r["genuine"],
            "impostor": r["impostor"],
            "acc": r["acc"],
        }

    def reset(self) -> None:
        super().reset()
        self._result_cache = None
