"""``build_backbone``: any timm model name -> a module mapping face crops to embeddings.

This is the Hydra target of ``model.backbone``. Face backbones (``embeds_faces = True``) already end
in an embedding block and are returned as they are; any other timm model is created headless
(``num_classes=0``) and followed by a :class:`~elasticface.backbones.neck.FaceNeck`.
"""

from __future__ import annotations

import difflib
from typing import Any, List

import timm
import torch
from torch import nn

from .neck import TimmEmbedder
from .registry import FACE_BACKBONES
from elasticface.utils.errors import BadValue

__all__ = ["build_backbone", "is_face_backbone", "suggest_backbones"]


def is_face_backbone(name: str) -> bool:
    """True for the face backbones this package registers (iresnet*, mobilefacenet*)."""
    return name.split(".")[0] in FACE_BACKBONES


def suggest_backbones(name: str, n: int = 8) -> List[str]:
    """Registered names closest to ``name``: names it begins, then difflib's closest spellings."""
    candidates = list(dict.fromkeys([*FACE_BACKBONES, *timm.list_models()]))
    prefixed = [c for c in candidates if c.startswith(name)][: n // 2]
    close = difflib.get_close_matches(name, candidates, n=n, cutoff=0.5)
    return list(dict.fromkeys([*prefixed, *close]))[:n]


def _check_known(name: str) -> None:
    if name.startswith(("hf-hub:", "hf_hub:", "local-dir:")) or timm.is_model(name):
        return
    matches = suggest_backbones(name)
    hint = f"Did you mean: {', '.join(matches)}? " if matches else ""
    raise BadValue(
        f"Unknown backbone '{name}'. {hint}Face backbones: {', '.join(FACE_BACKBONES)}. "
        f"Any timm model works; list them with `python -c \"import timm; print(timm.list_models())\"` "
        f"(or a pattern: timm.list_models('*resnet*'))."
    )


def _accepts_img_size(name: str) -> bool:
    """Whether the timm config says the model fixes its input size (ViTs, Swin, ...)."""
    try:
        cfg = timm.models.get_pretrained_cfg(name.split(".")[0])
    except Exception:  # noqa: BLE001 - any lookup failure just means "unknown"
        return False
    return bool(cfg is not None and getattr(cfg, "fixed_input_size", False))


def _create_headless(name: str, img_size: int, kwargs: dict) -> nn.Module:
    """timm model with ``num_classes=0``, passing ``img_size`` where its constructor takes it."""
    if _accepts_img_size(name):
        return timm.create_model(name, num_classes=0, img_size=img_size, **kwargs)
    try:
        return timm.create_model(name, num_classes=0, img_size=img_size, **kwargs)
    except TypeError as err:
        if "img_size" not in str(err):
            raise
    return timm.create_model(name, num_classes=0, **kwargs)


def build_backbone(
    name: str,
    embedding_size: int = 512,
    dropout: float = 0.0,
    img_size: int | None = 112,
    embedding_shift: bool = True,
    **timm_kwargs: Any,
) -> nn.Module:
    """Return a module mapping float [B, 3, img_size, img_size] crops to [B, embedding_size].

    Args:
        name: a face backbone (``iresnet50``, ``mobilefacenet``, ...) or any ``timm.list_models()`` name.
        embedding_size: size of the face embedding.
        dropout: face backbones: their own output-block dropout; other models: the neck's dropout.
        img_size: input side length, passed to models whose constructor takes it (ViTs: 112 with
            patch 16 gives 7x7 tokens); None is 112, the aligned faces' own size (``data.image_size: null``).
        embedding_shift: train the shift of the embedding's final BatchNorm1d, as insightface does.
            ``False`` holds it at zero, so the embeddings stay centred on the origin: in a 2-D embedding
            (the toy example) a learned shift moves the whole cloud off the origin, where every class
            sees it under nearly the same angle and the class centres merge.
        **timm_kwargs: passed to ``timm.create_model`` (``drop_path_rate``, ``checkpoint_path``,
            ``pretrained`` for timm's own ImageNet weights, ...).

    The returned module exposes ``embedding_size`` (and ``num_features``, equal to it).
    """
    if not isinstance(name, str) or not name:
        raise BadValue(f"Backbone name must be a non-empty string, got {name!r}")
    if timm_kwargs.get("num_classes"):
        raise BadValue(
            f"build_backbone returns an embedder, so num_classes={timm_kwargs['num_classes']} is not allowed; "
            "class centres live in model.centers"
        )
    timm_kwargs.pop("num_classes", None)
    img_size = 112 if img_size is None else img_size
    _check_known(name)
    if is_face_backbone(name):
        model = timm.create_model(
            name, num_classes=0, embedding_size=embedding_size, dropout=dropout, img_size=img_size, **timm_kwargs
        )
        model.embedding_size = embedding_size
    else:
        timm_kwargs.setdefault("pretrained", False)
        body = _create_headless(name, img_size, timm_kwargs)
        in_features = getattr(body, "head_hidden_size", None) or body.num_features
        model = TimmEmbedder(body, in_features, embedding_size=embedding_size, dropout=dropout, name=name)
    if not embedding_shift:
        _hold_embedding_shift_at_zero(model)
    return model


def _hold_embedding_shift_at_zero(model: nn.Module) -> None:
    """Zero the shift of the embedding's BatchNorm1d (every backbone here ends in one) and stop training it."""
    embedding_norm = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)][-1]
    with torch.no_grad():
        embedding_norm.bias.zero_()
    embedding_norm.bias.requires_grad_(False)

