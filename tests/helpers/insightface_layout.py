"""State_dicts in the layouts insightface and the official ElasticFace code release, written from their
architecture description (not by saving this project's models): an independent oracle for loading.

insightface arcface_torch ``iresnet.py`` (r18/r34/r50/r100/r200) and ElasticFace ``backbones/iresnet.py``:
stem conv1 (3x3, 64) + bn1 + prelu; four stages ``layer1..4`` of IBasicBlocks (bn1, conv1 3x3, bn2, prelu,
conv2 3x3 with the stage's stride on the first block, bn3; the first block of every stage has
``downsample`` = 1x1 conv + BN); then bn2, ``fc`` Linear(512*7*7 -> E) with bias, ``features`` BatchNorm1d(E).
ElasticFace's SE=True adds ``se_block.fc1`` (C -> C/16) and ``se_block.fc2`` (C/16 -> C) 1x1 convs, no bias.

insightface ``mobilefacenet.py`` (``mbf``: blocks (1, 4, 6, 2), scale 2): ``layers`` ModuleList of
ConvBlock(3 -> 64s, 3x3 s2), ConvBlock(64s, 64s, 3x3, groups 64) (or a Residual when blocks[0] > 1),
DepthWise(64s -> 64s, hidden 128), Residual(64s, blocks[1], hidden 128), DepthWise(64s -> 128s, hidden 256),
Residual(128s, blocks[2], hidden 256), DepthWise(128s -> 128s, hidden 512), Residual(128s, blocks[3], hidden 256);
``conv_sep`` ConvBlock(128s -> 512); ``features`` GDC: LinearBlock(512, 7x7 depthwise), Flatten, Linear(512 -> E,
no bias), BatchNorm1d(E). ConvBlock = Sequential(conv, BN, PReLU); LinearBlock = Sequential(conv, BN);
DepthWise = Sequential(ConvBlock 1x1 -> hidden, ConvBlock 3x3 depthwise, LinearBlock 1x1 -> out).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

Shape = tuple[int, ...]

IRESNET_BLOCKS = {"iresnet18": (2, 2, 2, 2), "iresnet34": (3, 4, 6, 3), "iresnet50": (3, 4, 14, 3),
                  "iresnet100": (3, 13, 30, 3), "iresnet200": (6, 26, 60, 6)}
#: this project's CPU demo backbone: insightface's layout at widths 16-128, one block per stage, the first
#: stage at stride 1 (so its block has no downsample shortcut)
TINY = dict(blocks=(1, 1, 1, 1), widths=(16, 32, 64, 128), strides=(1, 2, 2, 2))
#: entries of the released state_dicts (parameters and BN buffers), as REFERENCE.md gives them
KEY_COUNTS = {"iresnet50": 475, "iresnet100": 925, "mobilefacenet": 333}


def _bn(out: "OrderedDict[str, Shape]", name: str, c: int) -> None:
    for suffix in ("weight", "bias", "running_mean", "running_var"):
        out[f"{name}.{suffix}"] = (c,)
    out[f"{name}.num_batches_tracked"] = ()


def iresnet_layout(blocks: tuple[int, ...], embedding_size: int = 512, se: bool = False,
                   widths: tuple[int, ...] = (64, 128, 256, 512),
                   strides: tuple[int, ...] = (2, 2, 2, 2)) -> "OrderedDict[str, Shape]":
    out: OrderedDict[str, Shape] = OrderedDict()
    stem = widths[0]  # insightface: 64, the first stage's width
    out["conv1.weight"] = (stem, 3, 3, 3)
    _bn(out, "bn1", stem)
    out["prelu.weight"] = (stem,)
    in_c = stem
    for stage, (n, c, stride) in enumerate(zip(blocks, widths, strides), start=1):
        for i in range(n):
            p = f"layer{stage}.{i}"
            cin = in_c if i == 0 else c
            _bn(out, f"{p}.bn1", cin)
            out[f"{p}.conv1.weight"] = (c, cin, 3, 3)
            _bn(out, f"{p}.bn2", c)
            out[f"{p}.prelu.weight"] = (c,)
            out[f"{p}.conv2.weight"] = (c, c, 3, 3)
            _bn(out, f"{p}.bn3", c)
            if se:
                out[f"{p}.se_block.fc1.weight"] = (c // 16, c, 1, 1)
                out[f"{p}.se_block.fc2.weight"] = (c, c // 16, 1, 1)
            if i == 0 and (stride != 1 or cin != c):
                out[f"{p}.downsample.0.weight"] = (c, cin, 1, 1)
                _bn(out, f"{p}.downsample.1", c)
        in_c = c
    _bn(out, "bn2", widths[-1])
    out["fc.weight"] = (embedding_size, widths[-1] * 7 * 7)
    out["fc.bias"] = (embedding_size,)
    _bn(out, "features", embedding_size)
    return out


def _conv_block(out: "OrderedDict[str, Shape]", p: str, cin: int, cout: int, k: int = 1, groups: int = 1,
                prelu: bool = True) -> None:
    out[f"{p}.layers.0.weight"] = (cout, cin // groups, k, k)
    _bn(out, f"{p}.layers.1", cout)
    if prelu:
        out[f"{p}.layers.2.weight"] = (cout,)


def _depthwise(out: "OrderedDict[str, Shape]", p: str, cin: int, cout: int, hidden: int) -> None:
    _conv_block(out, f"{p}.layers.0", cin, hidden)
    _conv_block(out, f"{p}.layers.1", hidden, hidden, k=3, groups=hidden)
    _conv_block(out, f"{p}.layers.2", hidden, cout, prelu=False)


def _residual(out: "OrderedDict[str, Shape]", p: str, c: int, n: int, hidden: int) -> None:
    for i in range(n):
        _depthwise(out, f"{p}.layers.{i}", c, c, hidden)


def mobilefacenet_layout(blocks: tuple[int, ...] = (1, 4, 6, 2), scale: int = 2,
                         embedding_size: int = 512) -> "OrderedDict[str, Shape]":
    out: OrderedDict[str, Shape] = OrderedDict()
    c64, c128 = 64 * scale, 128 * scale
    _conv_block(out, "layers.0", 3, c64, k=3)
    if blocks[0] == 1:
        _conv_block(out, "layers.1", c64, c64, k=3, groups=64)
    else:
        _residual(out, "layers.1", c64, blocks[0], 128)
    _depthwise(out, "layers.2", c64, c64, 128)
    _residual(out, "layers.3", c64, blocks[1], 128)
    _depthwise(out, "layers.4", c64, c128, 256)
    _residual(out, "layers.5", c128, blocks[2], 256)
    _depthwise(out, "layers.6", c128, c128, 512)
    _residual(out, "layers.7", c128, blocks[3], 256)
    _conv_block(out, "conv_sep", c128, 512)
    _conv_block(out, "features.layers.0", 512, 512, k=7, groups=512, prelu=False)
    out["features.layers.2.weight"] = (embedding_size, 512)
    _bn(out, "features.layers.3", embedding_size)
    return out


def released_state_dict(layout: "OrderedDict[str, Shape]", seed: int = 0, prefix: str = "") -> dict[str, torch.Tensor]:
    """Tensors of the given layout with values a trained network could have: He-scaled conv/linear weights,
    BN scale near 1 with positive running variances, PReLU slopes 0.25, integer ``num_batches_tracked``."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for key, shape in layout.items():
        if key.endswith("num_batches_tracked"):
            value = torch.tensor(1000, dtype=torch.long)
        elif key.endswith("running_var"):
            value = 0.5 + torch.rand(shape, generator=g)
        elif key.endswith("running_mean"):
            value = 0.1 * torch.randn(shape, generator=g)
        elif len(shape) == 1 and key.endswith("prelu.weight") or (len(shape) == 1 and ".layers.2.weight" in key):
            value = torch.full(shape, 0.25)
        elif len(shape) == 1 and key.endswith("weight"):  # BN scale
            value = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif len(shape) == 1:  # BN shift, linear bias
            value = 0.1 * torch.randn(shape, generator=g)
        else:
            fan_in = 1
            for d in shape[1:]:
                fan_in *= d
            value = torch.randn(shape, generator=g) * (2.0 / fan_in) ** 0.5
        out[prefix + key] = value
    return out
