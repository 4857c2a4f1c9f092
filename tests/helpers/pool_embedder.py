"""A tiny deterministic embedding model for the file-tool tests (embed, eval, compare): average pooling then a
linear map, so exports (TorchScript, ONNX) and their embeddings are quick and exactly comparable."""

from __future__ import annotations

import torch
from torch import nn


class PoolEmbedder(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.pool = nn.AvgPool2d(8)
        self.proj = nn.Linear(3 * 14 * 14, 64)

    def forward(self, x):
        return self.proj(self.pool(x).flatten(1))
