"""MegaFace scoring speed and memory: the chunked scan against a dense numpy scoring, and the 10^6 extrapolation.

    python benchmarks/bench_megaface.py [--probes 3530] [--identities 80] [--distractors 100000]
                                        [--dense 10000] [--dim 512] [--device cpu]

Synthetic unit features (what the scoring sees after the embedding pass, which is not measured): 3,530 probes of
80 identities, as MegaFace's FaceScrub set, and float16 distractors. Each measurement runs in a fresh process,
so that its peak memory (the process's maximum resident set) is its own:

1. at `--dense` distractors, the dense baseline (numpy: the whole [probes x distractors] float32 matrix, ranks
   by sorting each row, the ROC of every score) and the chunked scan (`eval.identification.scoring.score_features`,
   raw and MegaFace (R) together, as eval.py runs them): both times, the ratio, and a check that every number agrees;
2. the scan alone at `--distractors` (10^5 by default): time and peak memory, and their extrapolation to 10^6
   distractors: time x (10^6 / n), memory + the float16 features and the impostor buffer that grow with n.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import numpy as np

FARS = (1e-6, 1e-5, 1e-4, 1e-3)


def features(probes: int, identities: int, distractors: int, dim: int, seed: int = 0):
    """Probes clustered by identity (so mates are near), distractors spread; 1% of each on the noise lists."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(identities, dim)).astype(np.float32)
    ids = np.arange(probes) % identities
    p = centres[ids] + 1.8 * rng.normal(size=(probes, dim)).astype(np.float32)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    d = np.empty((distractors, dim), dtype=np.float16)
    for s in range(0, distractors, 65536):  # in pieces: the peak memory measured is the scoring's, not this
        piece = rng.standard_normal(size=(min(65536, distractors - s), dim), dtype=np.float32)
        d[s : s + len(piece)] = piece / np.linalg.norm(piece, axis=1, keepdims=True)
    return p, [str(i) for i in ids], d, rng.random(probes) < 0.01, rng.random(distractors) < 0.01


def chunked(p, ids, d, probe_noise, dist_noise, device: str) -> dict:
    import torch

    from elasticface.eval.identification.planning import plan_passes
    from elasticface.eval.identification.refine import refine_probes
    from elasticface.eval.identification.scoring import score_features

    refined = refine_probes(p, ids, probe_noise)
    passes = plan_passes(np.arange(len(d)), [len(d)], 0, {}, [])
    res = score_features(p, refined, probe_noise, ids, torch.from_numpy(d), dist_noise, passes, FARS, max_rank=10,
                         chunk=None, device=device)
    n = str(len(d))
    return {v: {"rank1": res[v]["rank1"][n], "cmc": res[v]["cmc"][n],
                **{k: res[v][k] for k in res[v] if k.startswith("tar_at_far")}} for v in ("raw", "refined")}


def dense(p, ids, d, probe_noise, dist_noise) -> dict:
    """The straightforward way, raw features only: every score at once, each row sorted, the ROC of them all."""
    from elasticface.metrics.roc import roc_curve, tar_at_fars

    df = d.astype(np.float32)
    scores = 2 * (p @ df.T) - (p * p).sum(1)[:, None] - (df * df).sum(1)[None, :]   # [P, N]: -squared L2
    ranked = np.sort(scores, axis=1)[:, ::-1]
    ids = np.asarray(ids)
    genuine, ranks = [], []
    for i in range(len(p)):
        for j in np.flatnonzero(ids == ids[i]):
            if j != i:
                s = 2 * float(p[i] @ p[j]) - float(p[i] @ p[i]) - float(p[j] @ p[j])
                genuine.append(s)
                ranks.append(int(np.searchsorted(-ranked[i], -s, side="right")) + 1)
    ranks = np.array(ranks)
    fpr, tpr, _ = roc_curve(np.r_[genuine, scores.ravel()], np.r_[np.ones(len(genuine), bool),
                                                                  np.zeros(scores.size, bool)])
    return {"raw": {"rank1": float((ranks <= 1).mean()), "cmc": [float((ranks <= k).mean()) for k in range(1, 11)],
                    **tar_at_fars(fpr, tpr, FARS)}}


def child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    data = features(args.probes, args.identities, args.n, args.dim)
    start = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_start = usage.ru_utime + usage.ru_stime
    out = dense(*data) if args.child == "dense" else chunked(*data, device=args.device)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu_start
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_bytes": usage.ru_maxrss * 1024, "result": out}))


def run(args: argparse.Namespace, which: str, n: int) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--n", str(n), "--probes", str(args.probes), "--identities",
           str(args.identities), "--dim", str(args.dim), "--device", args.device, "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=3530)
    parser.add_argument("--identities", type=int, default=80)
    parser.add_argument("--distractors", type=int, default=100_000)
    parser.add_argument("--dense", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", choices=("dense", "chunked"), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    gib = 1024**3
    base, ours = run(args, "dense", args.dense), run(args, "chunked", args.dense)
    a, b = base["result"]["raw"], ours["result"]["raw"]
    # the two sum the same products in other orders: a score may differ in its last bit, so a near tie may fall the
    # other way; allowed is one (probe, mate) pair's worth in the rates
    diff = max(abs(x - y) for k in a for x, y in zip(np.atleast_1d(a[k]), np.atleast_1d(b[k])))
    agree = diff <= 1.5 / (args.probes * (args.probes / args.identities - 1))
    print(f"{args.probes:,} probes of {args.identities} identities, {args.dim}-d, {args.threads} threads, "
          f"device {args.device}")
    print(f"at {args.dense:,} distractors: dense numpy (raw only) {base['seconds']:.2f} s, peak "
          f"{base['peak_bytes'] / gib:.2f} GiB; chunked (raw and (R)) {ours['seconds']:.2f} s, peak "
          f"{ours['peak_bytes'] / gib:.2f} GiB; ratio {base['seconds'] / ours['seconds']:.1f}x; "
          f"same numbers: {agree} (largest difference {diff:.2g})")
    if not agree:
        print("dense:  ", base["result"]["raw"], "\nchunked:", ours["result"]["raw"])
        raise SystemExit(1)
    big = run(args, "chunked", args.distractors)
    scale = 1_000_000 / args.distractors
    # what grows with n besides the scan's fixed working set: the float16 features and the impostor buffer
    # (at most 2 x keep + 2^20 float32 per view, keep = 2 x FAR 1e-3 x probes x n)
    grows = lambda n: n * args.dim * 2 + 2 * 4 * (2 * (2 * 1e-3 * args.probes * n + 1) + 2**20)  # noqa: E731
    peak = big["peak_bytes"] + grows(1_000_000) - grows(args.distractors)
    r = big["result"]
    print(f"at {args.distractors:,} distractors: {big['seconds']:.1f} s ({big['cpu_seconds']:.1f} s of CPU), peak "
          f"{big['peak_bytes'] / gib:.2f} GiB "
          f"(rank-1 raw {100 * r['raw']['rank1']:.2f}%, (R) {100 * r['refined']['rank1']:.2f}%; TAR at FAR 1e-6 raw "
          f"{100 * r['raw']['tar_at_far_1e-6']:.2f}%)")
    print(f"extrapolated to 1,000,000 distractors: {big['seconds'] * scale:.0f} s "
          f"({math.ceil(big['seconds'] * scale / 60)} min; {big['cpu_seconds'] * scale:.0f} s of CPU, "
          f"{big['cpu_seconds'] * scale / args.threads:.0f} s on {args.threads} idle cores), peak {peak / gib:.2f} GiB")
    with open("/proc/loadavg") as f:
        print(f"load average while it ran (1, 5, 15 min): {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
