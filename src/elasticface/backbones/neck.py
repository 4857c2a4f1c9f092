"""Face-embedding neck for generic timm models, and the backbone + neck embedder module."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FaceNeck", "TimmEmbedder"]


class FaceNeck(nn.Module):
    """Pooled features [B, in_features] -> face embedding [B, embedding_size].

    BN1d -> Dropout -> Linear -> BN1d, the insightface output block applied to pooled features.
    The final BN1d keeps its scale fixed at 1 and trains only its shift, as insightface's
    IResNet ``features`` BN does, so every backbone ends in the same kind of embedding layer.
    The Linear has no bias because the BN after it would cancel one.
    """

    def __init__(self, in_features: int, embedding_size: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.in_features = in_features
        self.embedding_size = embedding_size
        self.bn_in = nn.BatchNorm1d(in_features, eps=1e-5)
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(in_features, embedding_size, bias=False)
        self.features = nn.BatchNorm1d(embedding_size, eps=1e-5)
        nn.init.ones_(self.features.weight)
        self.features.weight.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_tracing() and (x.ndim != 2 or x.shape[1] != self.in_features):
            raise ValueError(
                f"FaceNeck expects pooled features of shape [B, {self.in_features}], got {list(x.shape)}; "
                f"create the timm model with num_classes=0 so it returns pooled features"
            )
        return self.features(self.fc(self.dropout(self.bn_in(x))))


class TimmEmbedder(nn.Module):
    """A timm model created with ``num_classes=0`` followed by a :class:`FaceNeck`.

    ``body`` keeps the timm API (``forward_features``, ``set_grad_checkpointing``, ...);
    ``forward`` maps [B, 3, H, W] images to [B, embedding_size] embeddings.
    """

    embeds_faces = True

    def __init__(self, body: nn.Module, in_features: int, embedding_size: int = 512, dropout: float = 0.0,
                 name: str = "") -> None:
        super().__init__()
        self.name = name
        self.body = body
        self.neck = FaceNeck(in_features, embedding_size, dropout)
        self.embedding_size = self.num_features = embedding_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.neck(self.body(x))

    def extra_repr(self) -> str:
        return f"name={self.name!r}, embedding_size={self.embedding_size}"
