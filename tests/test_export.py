"""ONNX / TorchScript export of an embedding model, checked against PyTorch with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from elasticface.eval.embed import load_model_file
from elasticface.export import ExportMismatchError, export_onnx, export_torchscript

pytest.importorskip("onnxruntime")


class TinyEmbedder(nn.Module):
    """A stand-in for backbone + neck: conv, BN, pooling, linear, BN1d -> 512-d."""

    def __init__(self, dim: int = 512) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.BatchNorm2d(8), nn.PReLU(8), nn.AdaptiveAvgPool2d(4)
        )
        self.neck = nn.Sequential(nn.Flatten(), nn.Linear(8 * 16, dim), nn.BatchNorm1d(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.neck(self.features(x))


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = TinyEmbedder()
    model.train()
    with torch.no_grad():  # non-trivial BN statistics
        for _ in range(3):
            model(torch.randn(8, 3, 112, 112))
    return model.eval()


def test_onnx_export_dynamic_batch_matches_pytorch(tmp_path):
    import onnxruntime as ort

    model = _model()
    path = str(tmp_path / "model.onnx")
    diff = export_onnx(model, path, opset=17, check=True)
    assert 0.0 <= diff < 1e-3
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[0] == "batch"
    for batch in (1, 5):
        x = torch.randn(batch, 3, 112, 112)
        got = session.run(None, {"images": x.numpy()})[0]
        assert got.shape == (batch, 512)
        np.testing.assert_allclose(got, model(x).detach().numpy(), atol=1e-3)
    # the same file works through the evaluation loader
    emb = load_model_file(path, "cpu", allow_torchscript=True)(torch.randn(2, 3, 112, 112))
    assert emb.shape == (2, 512)


def test_export_mismatch_raises(tmp_path):
    with pytest.raises(ExportMismatchError, match="exceeds atol"):
        export_onnx(_model(), str(tmp_path / "m.onnx"), atol=-1.0)


def test_torchscript_export(tmp_path):
    model = _model()
    path = str(tmp_path / "model.pt")
    assert export_torchscript(model, path) < 1e-4
    loaded = load_model_file(path, "cpu", allow_torchscript=True)
    x = torch.randn(3, 3, 112, 112)
    torch.testing.assert_close(loaded(x), model(x))
