"""ONNX export of an embedding model, with a dynamic batch dimension, checked with onnxruntime.

The graph's input is `images` float32 [B, 3, 112, 112] in [-1, 1], its output `embeddings` [B, 512], raw and
unnormalised like `module.embed`. We use torch's TorchScript-based ONNX exporter (`dynamo=False`): it needs no
extra packages (the dynamo exporter needs onnxscript) and handles every backbone in the zoo.
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

import torch
from torch import nn

from elasticface.export.check import (ExportMismatchError, check_difference, cpu_eval_copy, example_input,
                                      scaled_difference)
from elasticface.utils.requirements import require_module


def export_onnx(
    model: nn.Module,
    path: str,
    opset: int = 17,
    check: bool = True,
    image_size: int = 112,
    atol: float = 1e-3,
    check_batch_sizes: Sequence[int] = (1, 3),
) -> float:
    """Export `model` (float [B, 3, S, S] -> [B, D]) to ONNX with a dynamic batch; returns the max abs
    difference to PyTorch found by onnxruntime (0.0 when `check=False`)."""
    if check:  # before the export, not after minutes of tracing
        require_module("onnx", "checking an ONNX export", "export", "onnx")
        require_module("onnxruntime", "checking an ONNX export", "export", "onnxruntime")
    model = cpu_eval_copy(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        torch.onnx.export(
            model,
            (example_input(2, image_size, 0),),
            path,
            dynamo=False,
            opset_version=opset,
            input_names=["images"],
            output_names=["embeddings"],
            dynamic_axes={"images": {0: "batch"}, "embeddings": {0: "batch"}},
            do_constant_folding=True,
        )
    if not check:
        return 0.0
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(onnx.load(path))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    diff = 0.0
    for i, batch in enumerate(check_batch_sizes):
        x = example_input(batch, image_size, 1 + i)
        with torch.no_grad():
            want = model(x).numpy()
        got = session.run(None, {"images": x.numpy()})[0]
        if got.shape != want.shape:
            raise ExportMismatchError(f"{path}: ONNX output shape {got.shape} != PyTorch {want.shape} "
                                      f"for batch {batch}")
        diff = max(diff, scaled_difference(got, want))
    return check_difference(path, diff, atol)
