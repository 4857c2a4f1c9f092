"""Shared plumbing for face backbones registered into timm's model registry.

Face backbones are ordinary timm models: ``timm.create_model("iresnet50")`` works once
``elasticface.backbones`` has been imported. Their pretrained config records the face-crop
input (3x112x112, mean = std = 0.5) and ``num_classes=0``, so a bare ``create_model`` returns
the 512-d embedding rather than ImageNet logits.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, TypeVar

from timm.models import register_model
from elasticface.utils.errors import BadValue

FACE_BACKBONES: List[str] = []
"""Names of the face backbones this package registers with timm, in registration order."""

F = TypeVar("F", bound=Callable[..., Any])


def face_cfg(**overrides: Any) -> Dict[str, Any]:
    """Pretrained-config dict (no weights) describing an aligned 112x112 face crop."""
    cfg: Dict[str, Any] = {
        "url": "",
        "num_classes": 0,
        "input_size": (3, 112, 112),
        "pool_size": (7, 7),
        "fixed_input_size": True,
        "crop_pct": 1.0,
        "interpolation": "bilinear",
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "first_conv": "conv1",
        "classifier": "head",
        "license": "mit",
    }
    cfg.update(overrides)
    return cfg


def register_face_model(fn: F) -> F:
    """``timm.models.register_model`` that also records the name in :data:`FACE_BACKBONES`."""
    register_model(fn)
    if fn.__name__ not in FACE_BACKBONES:
        FACE_BACKBONES.append(fn.__name__)
    return fn


def refuse_pretrained(name: str, pretrained: bool) -> None:
    """Face backbones ship no downloadable weights; say how to load a local checkpoint instead."""
    if pretrained:
        raise BadValue(
            f"No pretrained weights can be downloaded for face backbone '{name}'. Pass a local "
            f"state dict instead: timm.create_model('{name}', checkpoint_path='/path/backbone.pth') "
            f"(insightface / ElasticFace backbone .pth files load as they are), or with the commands: "
            f"python train.py backbone={name} weights=/path/backbone.pth (eval.py, embed and export take weights= too)."
        )



def apply_timm_aliases(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Accept timm's ``drop_rate`` for the face backbones' ``dropout`` (same meaning)."""
    if "drop_rate" in kwargs:
        drop_rate = kwargs.pop("drop_rate")
        if "dropout" in kwargs and kwargs["dropout"] != drop_rate:
            raise BadValue(f"Got both dropout={kwargs['dropout']} and drop_rate={drop_rate}; pass one")
        kwargs["dropout"] = drop_rate
    return kwargs
