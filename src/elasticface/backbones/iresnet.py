"""IResNet ("improved ResNet") face backbones as in insightface's arcface_torch, as timm models.

Layout (Deng et al., ArcFace; Duta et al., IResNet): a 3x3 stride-1 stem keeps the 112x112 crop at
full resolution, four stages of pre-activation-style ``IBasicBlock``s each halve it (112 -> 7), and
the output block flattens the 7x7 map, so the embedding keeps the spatial layout of the face
(no global pooling):  BN2d -> Dropout -> flatten -> Linear(C*7*7 -> 512) -> BN1d.

Module and parameter names follow insightface, so an insightface or ElasticFace ``backbone.pth``
loads with ``timm.create_model("iresnet100", checkpoint_path=...)``. With ``num_classes=0`` (the
default) the forward pass returns the embedding; ``num_classes>0`` appends a Linear classifier.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from timm.models import build_model_with_cfg
from timm.models._manipulate import checkpoint_seq

from .registry import apply_timm_aliases, face_cfg, refuse_pretrained, register_face_model

__all__ = ["IBasicBlock", "IResNet"]

default_cfgs: Dict[str, Dict[str, Any]] = {
    name: face_cfg()
    for name in ("iresnet_tiny", "iresnet18", "iresnet34", "iresnet50", "iresnet100", "iresnet200")
}


def _conv3x3(in_chs: int, out_chs: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_chs, out_chs, kernel_size=3, stride=stride, padding=1, bias=False)


def _spatial_after_stages(size: int, strides: Sequence[int] = (2, 2, 2, 2)) -> int:
    """Side length after 3x3 convs with padding 1 and the given strides (112 -> 7 for four 2s)."""
    for stride in strides:
        size = (size - 1) // stride + 1
    return size


class IBasicBlock(nn.Module):
    """BN -> conv3x3 -> BN -> PReLU -> conv3x3(stride) -> BN, plus identity or conv1x1+BN shortcut.

    No activation after the sum: the next block starts with BN, which is what makes IResNet
    train stably at depth 100-200.
    """

    def __init__(self, in_chs: int, out_chs: int, stride: int = 1) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_chs, eps=1e-5)
        self.conv1 = _conv3x3(in_chs, out_chs)
        self.bn2 = nn.BatchNorm2d(out_chs, eps=1e-5)
        self.prelu = nn.PReLU(out_chs)
        self.conv2 = _conv3x3(out_chs, out_chs, stride)
        self.bn3 = nn.BatchNorm2d(out_chs, eps=1e-5)
        self.downsample: Optional[nn.Sequential] = None
        if stride != 1 or in_chs != out_chs:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_chs, out_chs, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_chs, eps=1e-5),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        return out + shortcut


class IResNet(nn.Module):
    """IResNet face backbone that maps a [B, C, 112, 112] crop to a [B, embedding_size] embedding.

    Args:
        layers: blocks per stage, e.g. ``(3, 4, 14, 3)`` for iresnet50.
        channels: width of the stem and of the four stages.
        num_classes: 0 returns the embedding; >0 appends ``Linear(embedding_size, num_classes)``.
        embedding_size: size of the face embedding (insightface's ``num_features``).
        dropout: dropout on the flattened feature map before the embedding Linear.
        in_chans: input channels.
        img_size: input side length (int or (H, W)); sets the FC input size (112 -> 7x7).
        zero_init_residual: start every block as identity (insightface's option).
        stem_stride: stride of the stem conv; insightface uses 1 (full-resolution first stage).
        strides: stride of the first block of each stage; insightface uses (2, 2, 2, 2).
            ``iresnet_tiny`` uses stem_stride=2, strides=(1, 2, 2, 2): same 7x7 output, ~4x
            fewer full-resolution activations, which is what makes it fast on a CPU.
    """

    embeds_faces = True  # ends in a face-embedding block: build_backbone adds no neck

    def __init__(
        self,
        layers: Sequence[int],
        channels: Sequence[int] = (64, 128, 256, 512),
        num_classes: int = 0,
        embedding_size: int = 512,
        dropout: float = 0.0,
        in_chans: int = 3,
        img_size: Union[int, Tuple[int, int]] = 112,
        zero_init_residual: bool = False,
        stem_stride: int = 1,
        strides: Sequence[int] = (2, 2, 2, 2),
    ) -> None:
        super().__init__()
        if len(layers) != 4 or len(channels) != 4 or len(strides) != 4:
            raise ValueError(
                f"IResNet expects 4 stages, got layers={layers} channels={channels} strides={strides}"
            )
        height, width = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        all_strides = (stem_stride, *strides)
        self.feat_size = (_spatial_after_stages(height, all_strides), _spatial_after_stages(width, all_strides))
        self.num_classes = num_classes
        self.embedding_size = embedding_size
        self.num_features = self.head_hidden_size = embedding_size
        self.drop_rate = dropout
        self.grad_checkpointing = False

        stem_chs = channels[0]
        self.conv1 = nn.Conv2d(in_chans, stem_chs, kernel_size=3, stride=stem_stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem_chs, eps=1e-5)
        self.prelu = nn.PReLU(stem_chs)
        reduction = stem_stride
        self.feature_info: List[Dict[str, Any]] = [dict(num_chs=stem_chs, reduction=reduction, module="prelu")]
        in_chs = stem_chs
        for idx, (depth, out_chs, stride) in enumerate(zip(layers, channels, strides)):
            blocks = [IBasicBlock(in_chs, out_chs, stride=stride)]
            blocks += [IBasicBlock(out_chs, out_chs) for _ in range(depth - 1)]
            self.add_module(f"layer{idx + 1}", nn.Sequential(*blocks))
            reduction *= stride
            self.feature_info.append(dict(num_chs=out_chs, reduction=reduction, module=f"layer{idx + 1}"))
            in_chs = out_chs
        self.bn2 = nn.BatchNorm2d(in_chs, eps=1e-5)
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(in_chs * self.feat_size[0] * self.feat_size[1], embedding_size)
        # insightface keeps the embedding BN's scale at 1 and trains only its shift
        self.features = nn.BatchNorm1d(embedding_size, eps=1e-5)
        self.head: nn.Module = nn.Linear(embedding_size, num_classes) if num_classes > 0 else nn.Identity()
        self._init_weights(zero_init_residual)

    def _init_weights(self, zero_init_residual: bool) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.1)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.ones_(self.features.weight)
        self.features.weight.requires_grad_(False)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, IBasicBlock):
                    nn.init.zeros_(m.bn3.weight)

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(
            stem=r"^conv1|^bn1|^prelu",
            blocks=r"^layer(\d+)" if coarse else r"^layer(\d+)\.(\d+)",
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """Replace the classifier; ``global_pool`` is accepted for timm compatibility and ignored."""
        self.num_classes = num_classes
        self.head = nn.Linear(self.embedding_size, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, 112, 112] -> normalised final feature map [B, 512, 7, 7]."""
        x = self.prelu(self.bn1(self.conv1(x)))
        if self.grad_checkpointing and not torch.jit.is_scripting():
            for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
                x = checkpoint_seq(stage, x)
        else:
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.bn2(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Feature map -> embedding (``pre_logits`` or ``num_classes=0``) or class logits."""
        x = torch.flatten(self.dropout(x), 1)
        x = self.features(self.fc(x))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _create_iresnet(variant: str, pretrained: bool, layers: Sequence[int], **kwargs: Any) -> IResNet:
    refuse_pretrained(variant, pretrained)
    return build_model_with_cfg(
        IResNet,
        variant,
        pretrained=False,
        layers=layers,
        feature_cfg=dict(out_indices=(0, 1, 2, 3, 4)),
        **apply_timm_aliases(kwargs),
    )


@register_face_model
def iresnet_tiny(pretrained: bool = False, **kwargs: Any) -> IResNet:
    """Narrow 4-block IResNet for CPU demo runs and tests; not a paper model.

    Widths 16-128 and a stride-2 stem (insightface's IResNets keep the stem at stride 1), so the
    first stage runs at 56x56 instead of 112x112; the output is still 7x7 before the FC.
    """
    kwargs.setdefault("channels", (16, 32, 64, 128))
    kwargs.setdefault("stem_stride", 2)
    kwargs.setdefault("strides", (1, 2, 2, 2))
    return _create_iresnet("iresnet_tiny", pretrained, layers=(1, 1, 1, 1), **kwargs)


@register_face_model
def iresnet18(pretrained: bool = False, **kwargs: Any) -> IResNet:
    """IResNet-18 (insightface r18)."""
    return _create_iresnet("iresnet18", pretrained, layers=(2, 2, 2, 2), **kwargs)


@register_face_model
def iresnet34(pretrained: bool = False, **kwargs: Any) -> IResNet:
    """IResNet-34 (insightface r34)."""
    return _create_iresnet("iresnet34", pretrained, layers=(3, 4, 6, 3), **kwargs)


@register_face_model
def iresnet50(pretrained: bool = False, **kwargs: Any) -> IResNet:
    """IResNet-50 (insightface r50)."""
    return _create_iresnet("iresnet50", pretrained, layers=(3, 4, 14, 3), **kwargs)


@register_face_model
def iresnet100(pretrained: bool = False, **kwargs: Any) -> IResNet:
    """IResNet-100 (insightface r100; the ElasticFace paper's backbone)."""
    return _create_iresnet("iresnet100", pretrained, layers=(3, 13, 30, 3), **kwargs)


@register_face_model
def iresnet200(pretrained: bool = False, **kwargs: Any) -> IResNet:
    """IResNet-200 (insightface r200)."""
    return _create_iresnet("iresnet200", pretrained, layers=(6, 26, 60, 6), **kwargs)
