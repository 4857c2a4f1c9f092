"""Which architecture a backbone state_dict is, read off its keys and shapes alone.

Shared by the loaders of released weights (``weights``) and of insightface's MXNet zoo (``mxnet_zoo``), which
both name the registered backbone a file fits.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor

from .registry import FACE_BACKBONES

__all__ = ["Layout", "layout_of", "match_backbone"]


@dataclass(frozen=True)
class Layout:
    """What the shapes of a state_dict say about its architecture."""

    family: str                       # "iresnet", "mobilefacenet", "timm+neck" or "unknown"
    blocks: tuple[int, ...] = ()      # blocks per stage (iresnet) / per residual group (mobilefacenet)
    widths: tuple[int, ...] = ()      # stage widths (iresnet) / first conv width (mobilefacenet)
    embedding_size: int | None = None
    se: bool = False                  # ElasticFace's SE=True squeeze-excitation blocks

    def __str__(self) -> str:
        if self.family == "unknown":
            return "an architecture that is neither an iresnet nor a mobilefacenet"
        parts = [self.family]
        if self.blocks:
            parts.append(f"blocks {self.blocks}")
        if self.widths:
            parts.append(f"widths {self.widths}")
        if self.embedding_size is not None:
            parts.append(f"{self.embedding_size}-d embedding")
        if self.se:
            parts.append("SE blocks")
        return ", ".join(parts)


def _count(state: Mapping[str, Any], pattern: str) -> int:
    found = {int(m.group(1)) for k in state if (m := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def layout_of(state: Mapping[str, Tensor]) -> Layout:
    """Read blocks per stage, widths, embedding size and SE blocks off the keys and shapes."""
    def dim(key: str) -> int | None:
        return int(state[key].shape[0]) if key in state and state[key].ndim >= 1 else None

    if "conv1.weight" in state and "layer1.0.conv1.weight" in state:
        blocks = tuple(_count(state, rf"layer{s}\.(\d+)\.") for s in range(1, 5))
        widths = tuple(dim(f"layer{s}.0.conv1.weight") or 0 for s in range(1, 5))
        embedding = dim("fc.weight") or dim("features.running_mean")
        return Layout("iresnet", blocks, widths, embedding, se=any(".se_block." in k for k in state))
    if "layers.0.layers.0.weight" in state and "conv_sep.layers.0.weight" in state:
        first = 1 if "layers.1.layers.0.weight" in state else _count(state, r"layers\.1\.layers\.(\d+)\.layers\.")
        blocks = (first, *(_count(state, rf"layers\.{i}\.layers\.(\d+)\.layers\.") for i in (3, 5, 7)))
        return Layout("mobilefacenet", blocks, (dim("layers.0.layers.0.weight") or 0,), dim("features.layers.2.weight"))
    if any(k.startswith("body.") for k in state) and "neck.fc.weight" in state:
        return Layout("timm+neck", embedding_size=dim("neck.fc.weight"))
    return Layout("unknown")


@functools.lru_cache(maxsize=None)
def _known_layouts() -> dict[Layout, str]:
    """Layout (at embedding size 512) of every face backbone this package registers, built on the meta device."""
    import timm

    layouts: dict[Layout, str] = {}
    for name in FACE_BACKBONES:
        with torch.device("meta"):
            layout = layout_of(timm.create_model(name).state_dict())
        layouts.setdefault(_at(layout, 512), name)
    return layouts


def _at(layout: Layout, embedding_size: int | None) -> Layout:
    return Layout(layout.family, layout.blocks, layout.widths, embedding_size, layout.se)


def match_backbone(layout: Layout) -> str | None:
    """The registered face backbone with this layout (any embedding size, no SE), or None."""
    if layout.se:
        return None
    return _known_layouts().get(_at(layout, 512))
