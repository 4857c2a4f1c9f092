"""The streaming top-k: the highest scores of a scan kept batch by batch, so that billions never exist at once.

MegaFace keeps each probe's k best distractor scores over a million distractors; IJB 1:N keeps the pooled non-mate
scores its highest FPIR needs. Both merge a batch's scores into what they keep the same way, here.
"""

from __future__ import annotations

import torch
from torch import Tensor


def keep_top(kept: Tensor, scores: Tensor, k: int) -> Tensor:
    """The k highest values of `kept` and `scores` together along the last dimension (all of them when fewer),
    descending. The batch is cut to its own k highest first, so only those are ever copied."""
    best = torch.topk(scores, min(k, scores.shape[-1]), dim=-1).values
    both = torch.cat([kept, best], -1)
    return torch.topk(both, min(k, both.shape[-1]), dim=-1).values
