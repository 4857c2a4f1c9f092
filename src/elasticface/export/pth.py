"""A backbone's plain state_dict as insightface saves it: no `backbone.` prefix, fp32, no Lightning wrapper.

For iresnet* and mobilefacenet* it loads strictly into insightface's `get_model(name)` (r18/r34/r50/r100/r200,
mbf, mbf_large) and the official ElasticFace iresnets.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from elasticface.export.embedding_model import EmbedOnly


def export_pth(model: nn.Module, path: str) -> int:
    """Write the backbone's plain state_dict (insightface's layout for iresnet*/mobilefacenet*); returns its size."""
    from elasticface.backbones.weights import backbone_state_dict

    backbone = getattr(model, "backbone", model)  # a checkpoint's embed-only wrapper holds `backbone`
    if isinstance(model, EmbedOnly) and set(dict(model.named_children())) != {"backbone"}:
        raise RuntimeError(f"{path}: the embedding of this model uses more than its backbone "
                           f"({sorted(dict(model.named_children()))}); a backbone state_dict cannot hold it")
    state = backbone_state_dict(backbone)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    torch.save(state, path)
    return len(state)
