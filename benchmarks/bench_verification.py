"""Verification speed: the vectorised protocol against straightforward loops, and the IJB TAR table.

    python benchmarks/bench_verification.py [--pairs 6000] [--ijb-pairs 2000000] [--repeats 3]

1. 6,000 random pairs (LFW-sized), 10 folds, 400 accuracy and 4,000 TAR thresholds: `verification_scores`
   against one pass over the data per threshold and fold (insightface's loops).
2. A TAR@FAR table (FAR 1e-6 ... 1e-1) of `--ijb-pairs` tied similarity scores, few of them genuine:
   `roc_curve` + `tar_at_fars` against insightface's own rule (sklearn's `roc_curve`, then the
   min((distance, index)) loop over the flipped arrays); skipped when scikit-learn is not installed.

Prints the times, the speed ratio measured in this run, and checks both sides give identical results.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np

from elasticface.eval.ijb import DEFAULT_FARS
from elasticface.metrics.roc import roc_curve, tar_at_fars
from elasticface.metrics.verification import far_threshold, kfold_bounds, pair_distances, verification_scores


def loop_protocol(dist: np.ndarray, issame: np.ndarray, num_folds: int = 10, far_target: float = 1e-3) -> dict:
    """insightface-style: one pass over the data per threshold and fold."""
    thresholds, val_thresholds = np.arange(0, 4, 0.01), np.arange(0, 4, 0.001)
    idx = np.arange(dist.shape[0])
    acc, best, tar = [], [], []
    for start, stop in kfold_bounds(dist.shape[0], num_folds):
        test = idx[start:stop]
        train = np.setdiff1d(idx, test)

        def accuracy(t, s):
            p = dist[s] < t
            return float(np.sum(p & issame[s]) + np.sum(~p & ~issame[s])) / s.size

        def far(t, s):
            return float(np.sum((dist[s] < t) & ~issame[s])) / np.sum(~issame[s])

        acc_train = [accuracy(t, train) for t in thresholds]
        b = int(np.argmax(acc_train))
        best.append(thresholds[b])
        acc.append(accuracy(thresholds[b], test))
        far_train = np.array([far(t, train) for t in val_thresholds])
        thr = far_threshold(far_train, val_thresholds, far_target)
        tar.append(float(np.sum((dist[test] < thr) & issame[test])) / np.sum(issame[test]))
    return {"acc": np.mean(acc), "acc_std": np.std(acc), "threshold": np.mean(best), "tar": np.mean(tar)}


def insightface_table(scores: np.ndarray, labels: np.ndarray) -> list[float]:
    """eval_ijbc.py's table row: sklearn ROC, flipped, first (distance, index) minimum per FAR."""
    from sklearn.metrics import roc_curve as sk_roc

    fpr, tpr, _ = sk_roc(labels, scores)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    return [float(tpr[min(zip(np.abs(fpr - far), range(len(fpr))))[1]]) for far in DEFAULT_FARS]


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=6000)
    parser.add_argument("--ijb-pairs", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    issame = rng.random(args.pairs) < 0.5
    e1 = rng.normal(size=(args.pairs, 512))
    e2 = np.where(issame[:, None], e1 + 8.0 * rng.normal(size=e1.shape), rng.normal(size=e1.shape))
    dist = pair_distances(e1, e2)

    t_vec, vec = best_of(lambda: verification_scores(dist, issame), args.repeats)
    t_loop, loop = best_of(lambda: loop_protocol(dist, issame), args.repeats)
    same = all(vec[k] == loop[k] for k in ("acc", "acc_std", "threshold", "tar"))
    print(f"{args.pairs} pairs, 10 folds, 400 accuracy + 4000 TAR thresholds (best of {args.repeats})")
    print(f"  loops      {t_loop * 1e3:9.1f} ms")
    print(f"  vectorised {t_vec * 1e3:9.1f} ms")
    print(
        f"  speed-up   {t_loop / t_vec:9.1f}x   identical results: {same}   "
        f"acc {vec['acc']:.4f}  TAR@FAR1e-3 {vec['tar']:.4f}"
    )

    labels = rng.random(args.ijb_pairs) < 0.01
    scores = np.round(np.where(labels, rng.normal(0.5, 0.15, args.ijb_pairs), rng.normal(0.0, 0.1, args.ijb_pairs)), 4)
    t_ours, ours = best_of(
        lambda: list(tar_at_fars(*roc_curve(scores, labels)[:2], DEFAULT_FARS).values()), args.repeats
    )
    try:
        t_ref, ref = best_of(lambda: insightface_table(scores, labels), args.repeats)
    except ImportError:
        print("scikit-learn not installed: IJB table comparison skipped")
        ref = ours
    else:
        print(
            f"IJB TAR table of {args.ijb_pairs:,} scores ({labels.sum():,} genuine), "
            f"FAR 1e-6 ... 1e-1 (best of {args.repeats})"
        )
        print(f"  sklearn + insightface loop {t_ref * 1e3:9.1f} ms")
        print(f"  roc_curve + tar_at_fars    {t_ours * 1e3:9.1f} ms")
        print(
            f"  speed-up                   {t_ref / t_ours:9.2f}x   identical table: {ours == ref}   "
            + " ".join(f"{100 * v:.2f}" for v in ours)
        )
    if not same or ours != ref:
        raise SystemExit("the fast and the reference implementations differ")


if __name__ == "__main__":
    main()
