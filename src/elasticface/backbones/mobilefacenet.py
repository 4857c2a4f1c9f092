"""MobileFaceNet (Chen et al., 2018) as in insightface's arcface_torch ``mbf``, as a timm model.

Depthwise-separable bottlenecks take the 112x112 crop to a 7x7x512 map; the GDC output block
(global depthwise conv: a linear 7x7 depthwise conv, then flatten -> Linear -> BN1d) turns it into
the embedding while weighting face regions differently, which global average pooling cannot do.

Module and parameter names follow insightface, so its ``mbf`` ``backbone.pth`` files load with
``timm.create_model("mobilefacenet", checkpoint_path=...)``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from timm.models import build_model_with_cfg

from .iresnet import _spatial_after_stages
from .registry import apply_timm_aliases, face_cfg, refuse_pretrained, register_face_model

__all__ = ["MobileFaceNet"]

default_cfgs: Dict[str, Dict[str, Any]] = {
    "mobilefacenet": face_cfg(first_conv="layers.0.layers.0"),
    "mobilefacenet_large": face_cfg(first_conv="layers.0.layers.0"),
    "mobilefacenet_y1": face_cfg(first_conv="layers.0.layers.0"),
}

_Pair = Union[int, Tuple[int, int]]


class ConvBlock(nn.Module):
    """Conv -> BN -> PReLU."""

    def __init__(self, in_chs: int, out_chs: int, kernel: _Pair = 1, stride: _Pair = 1, padding: _Pair = 0,
                 groups: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(in_chs, out_chs, kernel, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_chs),
            nn.PReLU(out_chs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class LinearBlock(nn.Module):
    """Conv -> BN without activation (the linear bottleneck projection)."""

    def __init__(self, in_chs: int, out_chs: int, kernel: _Pair = 1, stride: _Pair = 1, padding: _Pair = 0,
                 groups: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(in_chs, out_chs, kernel, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_chs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class DepthWise(nn.Module):
    """Inverted bottleneck: 1x1 expand to ``hidden`` -> 3x3 depthwise(stride) -> 1x1 linear project."""

    def __init__(self, in_chs: int, out_chs: int, hidden: int, stride: int = 2, residual: bool = False) -> None:
        super().__init__()
        self.residual = residual
        self.layers = nn.Sequential(
            ConvBlock(in_chs, hidden),
            ConvBlock(hidden, hidden, kernel=3, stride=stride, padding=1, groups=hidden),
            LinearBlock(hidden, out_chs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(x)
        return x + out if self.residual else out


class Residual(nn.Module):
    """``num_block`` stride-1 residual bottlenecks at constant width."""

    def __init__(self, chs: int, num_block: int, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[DepthWise(chs, chs, hidden, stride=1, residual=True) for _ in range(num_block)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class GDC(nn.Module):
    """Global depthwise conv output block: linear kxk depthwise conv -> flatten -> Linear -> BN1d."""

    def __init__(self, in_chs: int, embedding_size: int, kernel: Tuple[int, int], dropout: float = 0.0) -> None:
        super().__init__()
        # indices match insightface's Sequential (1 is its parameter-free Flatten)
        self.layers = nn.Sequential(
            LinearBlock(in_chs, in_chs, kernel=kernel, groups=in_chs),
            nn.Flatten(1),
            nn.Linear(in_chs, embedding_size, bias=False),
            nn.BatchNorm1d(embedding_size),
        )
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.layers[1](self.layers[0](x)))
        return self.layers[3](self.layers[2](x))


class MobileFaceNet(nn.Module):
    """MobileFaceNet mapping a [B, C, 112, 112] crop to a [B, embedding_size] embedding.

    Args:
        blocks: residual bottlenecks in the four groups; ``(1, 4, 6, 2)`` is insightface's ``mbf``.
        scale: width multiplier of the 64/128-channel groups (2 for ``mbf``, 4 for ``mbf_large``).
        num_classes: 0 returns the embedding; >0 appends ``Linear(embedding_size, num_classes)``.
        embedding_size: size of the face embedding.
        dropout: dropout on the GDC output before its Linear (insightface has none: default 0).
        in_chans: input channels.
        img_size: input side length (int or (H, W)); sets the GDC kernel (112 -> 7x7).
    """

    embeds_faces = True  # ends in a face-embedding block (GDC): build_backbone adds no neck

    def __init__(
        self,
        blocks: Sequence[int] = (1, 4, 6, 2),
        scale: int = 2,
        num_classes: int = 0,
        embedding_size: int = 512,
        dropout: float = 0.0,
        in_chans: int = 3,
        img_size: Union[int, Tuple[int, int]] = 112,
    ) -> None:
        super().__init__()
        height, width = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.feat_size = (_spatial_after_stages(height), _spatial_after_stages(width))
        self.num_classes = num_classes
        self.embedding_size = embedding_size
        self.num_features = self.head_hidden_size = embedding_size
        self.drop_rate = dropout
        c64, c128 = 64 * scale, 128 * scale

        self.layers = nn.ModuleList([ConvBlock(in_chans, c64, kernel=3, stride=2, padding=1)])
        if blocks[0] == 1:
            # insightface uses groups=64 here (not fully depthwise); kept for weight compatibility
            self.layers.append(ConvBlock(c64, c64, kernel=3, stride=1, padding=1, groups=64))
        else:
            self.layers.append(Residual(c64, blocks[0], hidden=128))
        self.layers.extend([
            DepthWise(c64, c64, hidden=128, stride=2),
            Residual(c64, blocks[1], hidden=128),
            DepthWise(c64, c128, hidden=256, stride=2),
            Residual(c128, blocks[2], hidden=256),
            DepthWise(c128, c128, hidden=512, stride=2),
            Residual(c128, blocks[3], hidden=256),
        ])
        self.conv_sep = ConvBlock(c128, 512)
        self.features = GDC(512, embedding_size, kernel=self.feat_size, dropout=dropout)
        self.head: nn.Module = nn.Linear(embedding_size, num_classes) if num_classes > 0 else nn.Identity()
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if isinstance(self.head, nn.Linear):
            self.head.reset_parameters()

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """Replace the classifier; ``global_pool`` is accepted for timm compatibility and ignored."""
        self.num_classes = num_classes
        self.head = nn.Linear(self.embedding_size, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, 112, 112] -> [B, 512, 7, 7] (after the 1x1 ``conv_sep``)."""
        for layer in self.layers:
            x = layer(x)
        return self.conv_sep(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Feature map -> GDC embedding (``pre_logits`` or ``num_classes=0``) or class logits."""
        x = self.features(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _create_mobilefacenet(variant: str, pretrained: bool, **kwargs: Any) -> MobileFaceNet:
    refuse_pretrained(variant, pretrained)
    return build_model_with_cfg(MobileFaceNet, variant, pretrained=False, **apply_timm_aliases(kwargs))


@register_face_model
def mobilefacenet(pretrained: bool = False, **kwargs: Any) -> MobileFaceNet:
    """MobileFaceNet as insightface's ``mbf`` (blocks (1, 4, 6, 2), width x2, GDC output)."""
    kwargs.setdefault("blocks", (1, 4, 6, 2))
    kwargs.setdefault("scale", 2)
    return _create_mobilefacenet("mobilefacenet", pretrained, **kwargs)


@register_face_model
def mobilefacenet_large(pretrained: bool = False, **kwargs: Any) -> MobileFaceNet:
    """Insightface's ``mbf_large`` (blocks (2, 8, 12, 4), width x4, GDC output)."""
    kwargs.setdefault("blocks", (2, 8, 12, 4))
    kwargs.setdefault("scale", 4)
    return _create_mobilefacenet("mobilefacenet_large", pretrained, **kwargs)


@register_face_model
def mobilefacenet_y1(pretrained: bool = False, **kwargs: Any) -> MobileFaceNet:
    """insightface's MXNet MobileFaceNet "y1" (blocks (1, 4, 6, 2), width x1: 64/128 channels, 128-d GDC output).

    The layout of the released ``model-y1`` (LFW 99.50); its MXNet files load through ``weights=model-0000.params``.
    """
    kwargs.setdefault("blocks", (1, 4, 6, 2))
    kwargs.setdefault("scale", 1)
    kwargs.setdefault("embedding_size", 128)
    return _create_mobilefacenet("mobilefacenet_y1", pretrained, **kwargs)
