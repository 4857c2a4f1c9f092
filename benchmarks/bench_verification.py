"""Vectorised verification protocol vs the straightforward loops, on 6,000 random pairs (LFW-sized).

    python benchmarks/bench_verification.py [--pairs 6000] [--repeats 3]

Prints the time of each and the speed ratio measured in this run, and checks both give identical results.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from elasticface.eval.verification import kfold_bounds, pair_distances, verification_scores


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
        thr = np.interp(far_target, far_train, val_thresholds) if far_train.max() >= far_target else 0.0
        tar.append(float(np.sum((dist[test] < thr) & issame[test])) / np.sum(issame[test]))
    return {"acc": np.mean(acc), "acc_std": np.std(acc), "threshold": np.mean(best), "tar": np.mean(tar)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    issame = rng.random(args.pairs) < 0.5
    e1 = rng.normal(size=(args.pairs, 512))
    e2 = np.where(issame[:, None], e1 + 8.0 * rng.normal(size=e1.shape), rng.normal(size=e1.shape))
    dist = pair_distances(e1, e2)

    def best_of(fn) -> tuple[float, dict]:
        times, out = [], None
        for _ in range(args.repeats):
            start = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - start)
        return min(times), out

    t_vec, vec = best_of(lambda: verification_scores(dist, issame))
    t_loop, loop = best_of(lambda: loop_protocol(dist, issame))
    same = all(vec[k] == loop[k] for k in ("acc", "acc_std", "threshold", "tar"))
    print(f"{args.pairs} pairs, 10 folds, 400 accuracy + 4000 TAR thresholds (best of {args.repeats})")
    print(f"  loops      {t_loop * 1e3:9.1f} ms")
    print(f"  vectorised {t_vec * 1e3:9.1f} ms")
    print(f"  speed-up   {t_loop / t_vec:9.1f}x   identical results: {same}   acc {vec['acc']:.4f}  TAR@FAR1e-3 {vec['tar']:.4f}")
    if not same:
        raise SystemExit("vectorised and loop results differ")


if __name__ == "__main__":
    main()
