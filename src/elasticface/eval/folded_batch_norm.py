"""A backbone for CPU inference with each BatchNorm that follows a convolution (or a linear layer) folded into it.

In eval mode a BatchNorm is an affine map of its input, so the layer before it can absorb it: w' = w * g / sqrt(v + e),
b' = (b - mean) * g / sqrt(v + e) + beta. ONNX Runtime does this when it loads an exported model, and it is most of
why it embedded faster than eager torch on a CPU (MobileFaceNet y1, one thread: a BatchNorm after each of its 52
convolutions, each a pass over the activations). torch.fx traces the backbone and fuses the conv -> BN pairs
(`torch.fx.experimental.optimization.fuse`); the embeddings move by float32 rounding only (y1: 2.6e-6 at most,
tests/test_folded_batch_norm.py). A backbone that fx cannot trace runs as it was, said in one line. GPU evaluation
is left as it is: there cuDNN's BatchNorm costs little, and what was measured and checked is the CPU.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)


def fold_batch_norms(backbone: nn.Module, name: str = "the backbone") -> nn.Module:
    """`backbone` in eval mode with its conv -> BN and linear -> BN pairs fused (a new module; the given one is left
    as it is), or `backbone` itself where fx cannot trace it."""
    from torch.fx.experimental.optimization import fuse

    before = _batch_norms(backbone)
    if before == 0:
        return backbone
    try:
        folded = fuse(backbone.eval())  # a traced copy
    except Exception as err:  # noqa: BLE001 - a traced control flow fx cannot follow: run unfolded
        log.info("%s: BatchNorm not folded for CPU inference (torch.fx cannot trace it: %s)", name,
                 f"{type(err).__name__}: {str(err)[:120]}")
        return backbone.eval()
    log.info("%s: %d of %d BatchNorm layers folded into the layer before them for CPU inference", name,
             before - _batch_norms(folded), before)
    return folded


def _batch_norms(module: nn.Module) -> int:
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def for_cpu_inference(model: nn.Module, device: torch.device) -> nn.Module:
    """The model eval embeds with: on a CPU its backbone's BatchNorms folded (`fold_batch_norms`); elsewhere as given.
    A checkpoint's module (`eval.embed.ModuleEmbedder`) has its backbone folded in place of the original."""
    if device.type != "cpu":
        return model
    inner = getattr(model, "module", None)
    if inner is not None and isinstance(getattr(inner, "backbone", None), nn.Module):
        inner.backbone = fold_batch_norms(inner.backbone)
        return model
    return fold_batch_norms(model)
