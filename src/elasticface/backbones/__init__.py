"""Face backbones registered into timm's registry, the face-embedding neck, and ``build_backbone``.

Importing this package registers ``iresnet18/34/50/100/200``, ``iresnet_tiny``, ``mobilefacenet``
and ``mobilefacenet_large`` with timm, so ``timm.create_model("iresnet50")`` works afterwards.
"""

from .build import build_backbone, is_face_backbone, suggest_backbones
from .iresnet import IBasicBlock, IResNet
from .mobilefacenet import MobileFaceNet
from .neck import FaceNeck, TimmEmbedder
from .registry import FACE_BACKBONES

__all__ = [
    "FACE_BACKBONES",
    "FaceNeck",
    "IBasicBlock",
    "IResNet",
    "MobileFaceNet",
    "TimmEmbedder",
    "build_backbone",
    "is_face_backbone",
    "suggest_backbones",
]
