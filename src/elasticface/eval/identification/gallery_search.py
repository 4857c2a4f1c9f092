"""IJB-B/C 1:N identification as insightface's `recognition/_evaluation_/ijb/ijb_1n.py` reads it.

Every probe template is searched against one gallery (G1 and G2 together), which holds exactly one template of
its subject (the mate). Scores are cosine similarities of the unit template features.

- rank-k: the share of probes whose mate is among the k highest-scoring gallery templates (a gallery template
  scoring exactly as high as the mate does not push it down);
- TPIR at FPIR f: every non-mate score of every probe (P x (G - 1) of them) is pooled; the threshold is the
  ceil(P f)-th highest of them, and TPIR is the share of probes whose mate scores strictly above it. This is the
  script's reading, which the literature's IJB-C 1:N tables quote; insightface's later `ijb_evals.py` (PR #1739)
  reads an open-set DIR at FPIR with G1 and G2 as separate galleries instead, which gives other numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from elasticface.eval.identification.top_scores import keep_top
from elasticface.metrics.roc import far_key


def gallery_search(probe_feats: np.ndarray, mates: np.ndarray, gallery_feats: np.ndarray, *, fpirs: Sequence[float],
                   ranks: Sequence[int] = (1, 5, 10), batch: int = 4096) -> dict[str, float]:
    """{'rank1': .., 'rank5': .., 'rank10': .., 'tpir_at_fpir_1e-2': .., ...} for probes [P, D] whose mate is
    gallery row `mates[i]`; probes are scored `batch` at a time, keeping only the non-mate scores the highest
    FPIR needs."""
    q = torch.as_tensor(np.asarray(probe_feats), dtype=torch.float64)
    g = torch.as_tensor(np.asarray(gallery_feats), dtype=torch.float64)
    mates_t = torch.as_tensor(np.asarray(mates), dtype=torch.int64)
    n = q.shape[0]
    if n == 0:
        raise ValueError("IJB 1:N: no probe has its subject in the gallery")
    need = [max(math.ceil(n * f), 1) for f in fpirs]
    keep = min(max(need), n * (g.shape[0] - 1))
    above = torch.zeros(n, dtype=torch.int64)
    mate_scores = torch.empty(n, dtype=torch.float64)
    top = torch.empty(0, dtype=torch.float64)
    for s in range(0, n, batch):
        sim = q[s : s + batch] @ g.T
        rows = torch.arange(sim.shape[0])
        m = sim[rows, mates_t[s : s + batch]]
        mate_scores[s : s + batch] = m
        above[s : s + batch] = (sim > m[:, None]).sum(1)
        sim[rows, mates_t[s : s + batch]] = -float("inf")
        non_mates = sim[torch.isfinite(sim)]
        top = keep_top(top, non_mates, keep)
    out = {f"rank{k}": float((above < k).double().mean()) for k in ranks}
    for f, k in zip(fpirs, need):
        threshold = top[min(k, top.numel()) - 1] if top.numel() else -float("inf")
        out[far_key(f, "tpir_at_fpir")] = float((mate_scores > threshold).double().mean())
    return out
