"""The MegaFace devkit's identification protocol, scored a chunk of distractors at a time.

For each probe identity, each of its images is a probe and each other image of it is the mate added to the
distractor set (so an identity of n images gives n (n - 1) ordered (probe, mate) pairs; one of a single image
gives none). Rank-k: the share of (probe, mate) pairs whose mate scores above all but at most k - 1 distractors
(strictly above: a tie with a distractor counts against the mate). Verification: every (probe, mate) pair is
genuine, every (probe, distractor) pair impostor, and TAR at FAR is read by the project's ROC rule
(`metrics.roc`).

Scores are negative squared L2 distances, as the devkit compares its feature files: for unit vectors they order
pairs exactly as the cosine does, and MegaFace (R)'s extension coordinate (100 on a noisy distractor, 0 on every
probe) enters as an extra squared norm of that distractor, so the refined set shares the raw set's storage.

3,530 probes against 10^6 distractors are 3.5 billion scores: they never exist at once. Per probe only the k
best distractor scores are kept, and overall only the highest impostor scores the ROC reading needs
(`roc.impostors_to_keep`); several views of the probes (raw and refined) share each chunk's matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from elasticface.eval.identification.top_scores import keep_top


@dataclass
class ProbeView:
    """One way of scoring the probes: which rows of the stacked probe matrix are the probes (in probe order),
    and the squared extension added to each distractor's norm (None: none)."""

    rows: Tensor
    distractor_extra: Tensor | None = None


@dataclass
class ViewResult:
    """What a pass leaves of one view: the k best distractor scores per probe ([P, k], descending, -inf where a
    set holds fewer than k) after each checkpoint's number of distractors, and the highest impostor scores."""

    top: dict[int, Tensor] = field(default_factory=dict)
    impostors: Tensor | None = None
    num_impostors: int = 0


def mate_pairs(identities: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(probe rows, mate rows): every ordered pair of two different images of one identity."""
    ids = np.asarray(identities)
    probes, mates = [], []
    for ident in np.unique(ids):
        rows = np.flatnonzero(ids == ident)
        p, m = np.meshgrid(rows, rows, indexing="ij")
        off = p != m
        probes.append(p[off])
        mates.append(m[off])
    if not probes:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(probes).astype(np.int64), np.concatenate(mates).astype(np.int64)


def mate_scores(features: Tensor, probes: np.ndarray, mates: np.ndarray, batch: int = 65536) -> Tensor:
    """The (probe, mate) pairs' scores, float32, computed as `neg_sq_l2` computes a distractor's."""
    f = features.float()
    norm = (f * f).sum(1)
    out = torch.empty(len(probes), dtype=torch.float32)
    for s in range(0, len(probes), batch):
        p, m = torch.from_numpy(probes[s : s + batch]), torch.from_numpy(mates[s : s + batch])
        out[s : s + batch] = 2 * (f[p] * f[m]).sum(1) - norm[p] - norm[m]
    return out


def cmc(top: Tensor, probes: np.ndarray, scores: Tensor, max_rank: int) -> list[float]:
    """Rank-1 ... rank-`max_rank` identification rates of (probe, mate) pairs against one distractor set."""
    if len(probes) == 0:
        return [float("nan")] * max_rank
    best = top.cpu()[torch.from_numpy(probes)]  # [pairs, k]
    hits = scores[:, None] > best[:, :max_rank]
    return [float(v) for v in hits.double().mean(0)]


class _Impostors:
    """Every impostor score >= a rising threshold, pruned to the `keep` highest (ties included) as it grows."""

    def __init__(self, keep: int) -> None:
        self.keep, self.threshold, self.parts, self.size, self.seen = keep, -float("inf"), [], 0, 0

    def add(self, scores: Tensor) -> None:
        self.seen += scores.numel()
        if self.keep == 0:
            return
        if self.threshold == -float("inf"):
            kept = scores.reshape(-1)
        elif scores.is_cuda:
            kept = scores[scores >= self.threshold]
        else:  # numpy's boolean indexing: 3.5x torch's when few scores pass (measured on a 2-core EPYC)
            values = scores.numpy()
            kept = torch.from_numpy(values[values >= self.threshold])
        self.parts.append(kept)
        self.size += kept.numel()
        if self.size > 2 * self.keep + (1 << 20):
            self._prune()

    def _prune(self) -> None:
        values = torch.cat(self.parts) if len(self.parts) > 1 else self.parts[0]
        if values.numel() > self.keep:
            # the keep-th highest by selection (kthvalue counts from the lowest), not by sorting
            self.threshold = float(torch.kthvalue(values, values.numel() - self.keep + 1).values)
            values = values[values >= self.threshold]
        self.parts, self.size = [values], values.numel()

    def result(self) -> Tensor:
        if not self.parts:
            return torch.zeros(0)
        self._prune()
        return self.parts[0].cpu()


def search_distractors(
    probes: Tensor,
    views: Sequence[ProbeView],
    distractors: Tensor,
    order: Tensor,
    checkpoints: Sequence[int],
    *,
    k: int,
    chunk: int,
    verify_at: int | None = None,
    keep_impostors: int = 0,
    device: torch.device | str = "cpu",
) -> list[ViewResult]:
    """One pass over `distractors[order]` (any float dtype; chunks upcast to float32 on `device`).

    `probes` stacks every probe row any view uses; after the first n distractors of `order`, for each n in
    `checkpoints`, each view's top-k scores are kept. Impostor scores of the first `verify_at` distractors are
    kept as `roc.tar_at_fars_top` needs them (`keep_impostors` of the highest, ties included)."""
    device = torch.device(device)
    order = torch.as_tensor(order, dtype=torch.int64)
    q = probes.to(device=device, dtype=torch.float32)
    q_norm = (q * q).sum(1)
    n_probe = len(views[0].rows)
    rows = [v.rows.to(device) for v in views]
    extras = [None if v.distractor_extra is None else v.distractor_extra.to(device, torch.float32) for v in views]
    tops = [torch.full((n_probe, k), -float("inf"), device=device) for _ in views]
    impostors = [_Impostors(keep_impostors) for _ in views]
    results = [ViewResult() for _ in views]
    stops = sorted({*range(chunk, len(order), chunk), *checkpoints, *([verify_at] if verify_at else []), len(order)})
    in_place = bool(torch.equal(rows[-1].cpu(), torch.arange(n_probe)))
    marks, start = set(checkpoints), 0
    for stop in stops:
        if stop <= start:
            continue
        idx = order[start:stop].to(distractors.device)
        d = distractors.index_select(0, idx).to(device=device, dtype=torch.float32)
        d_norm = (d * d).sum(1)
        product = q @ d.T
        for i, view in enumerate(views):
            norm = d_norm if extras[i] is None else d_norm + extras[i][idx.to(device)]
            # the last view whose probes are the stack's first rows works in the product itself (no copy)
            last_in_place = i == len(views) - 1 and in_place
            scores = product[:n_probe] if last_in_place else product.index_select(0, rows[i])
            scores = scores.mul_(2).sub_(q_norm[rows[i], None]).sub_(norm[None, :])
            tops[i] = keep_top(tops[i], scores, k)
            if verify_at and stop <= verify_at:
                impostors[i].add(scores)
        start = stop
        if stop in marks:
            for i in range(len(views)):
                results[i].top[stop] = tops[i].cpu().clone()
    for i in range(len(views)):
        if verify_at:
            results[i].impostors = impostors[i].result()
            results[i].num_impostors = impostors[i].seen
    return results
