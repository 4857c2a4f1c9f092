"""Both views of the probes, MegaFace and MegaFace (R), scored by the planned scans of the distractors.

The raw and refined probes share each chunk's matrix product (`distractor_search`); per scan, the CMC at each
checkpoint and, on the verification set, TAR at FAR (`metrics.roc`'s rule, from the highest impostor scores only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from elasticface.eval.identification.distractor_search import (ProbeView, cmc, mate_pairs, mate_scores,
                                                              search_distractors)
from elasticface.eval.identification.planning import Pass
from elasticface.eval.identification.refine import distractor_extension
from elasticface.metrics.roc import impostors_to_keep, tar_at_fars_top

log = logging.getLogger(__name__)

VIEWS = ("raw", "refined")
NAMES = {"raw": "MegaFace", "refined": "MegaFace (R)"}  # each view's name in tables and figures


def score_features(raw: np.ndarray, refined: np.ndarray, probe_noise: np.ndarray, identities: Sequence[str],
                   distractors: Tensor, distractor_noise: np.ndarray, passes: list[Pass], fars: Sequence[float],
                   max_rank: int, chunk: int | None, device: torch.device | str,
                   problems: list[str] | None = None) -> dict[str, Any]:
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
