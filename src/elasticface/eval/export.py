"""Export the embedding model (backbone + neck, i.e. `module.embed`) to ONNX, TorchScript or a plain `.pth`.

`--format pth` writes the backbone's state_dict as insightface saves it (no `backbone.` prefix, fp32,
no Lightning wrapper): for iresnet* and mobilefacenet* it loads strictly into insightface's
`get_model(name)` (r18/r34/r50/r100/r200, mbf, mbf_large) and the official ElasticFace iresnets.

The ONNX graph has a dynamic batch dimension (input `images` float32 [B, 3, 112, 112] in [-1, 1],
output `embeddings` [B, 512], raw and unnormalised like `module.embed`). Every export is checked
against the PyTorch model on random inputs of two batch sizes; the maximum absolute difference is
returned and an export that differs by more than `atol` raises.

We use torch's TorchScript-based ONNX exporter (`dynamo=False`): it needs no extra packages
(the dynamo exporter needs onnxscript) and handles every backbone in the zoo.

CLI (`--weights` takes a Lightning .ckpt or a backbone state_dict, its type detected; `--ckpt` is the same)::

    python -m elasticface.eval.export --weights last.ckpt --out model.onnx [--torchscript model.pt]
    python -m elasticface.eval.export --weights last.ckpt --format pth --out backbone.pth
    python -m elasticface.eval.export --weights 295672backbone.pth --backbone iresnet100 --out r100.onnx
    python -m elasticface.eval.export weights=last.ckpt out=model.onnx
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import warnings
from typing import Sequence

import numpy as np
import torch
from torch import nn


class ExportMismatchError(RuntimeError):
    """The exported model's outputs differ from PyTorch's by more than the tolerance."""


def _example(batch: int, image_size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 3, image_size, image_size, generator=g) * 2 - 1


def _check(name: str, diff: float, atol: float) -> float:
    if not np.isfinite(diff) or diff > atol:
        raise ExportMismatchError(f"{name}: max abs difference {diff:.3g} to the PyTorch model exceeds atol={atol:g}")
    return diff


def _cpu_eval_copy(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model).cpu().eval()
    return model


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
    model = _cpu_eval_copy(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        torch.onnx.export(
            model,
            (_example(2, image_size, 0),),
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
        x = _example(batch, image_size, 1 + i)
        with torch.no_grad():
            want = model(x).numpy()
        got = session.run(None, {"images": x.numpy()})[0]
        if got.shape != want.shape:
            raise ExportMismatchError(f"{path}: ONNX output shape {got.shape} != PyTorch {want.shape} for batch {batch}")
        diff = max(diff, float(np.max(np.abs(got - want))))
    return _check(path, diff, atol)


def export_torchscript(
    model: nn.Module,
    path: str,
    check: bool = True,
    image_size: int = 112,
    atol: float = 1e-4,
    check_batch_sizes: Sequence[int] = (1, 3),
) -> float:
    """Trace `model` with torch.jit.trace and save it; returns the max abs difference of the reloaded trace."""
    model = _cpu_eval_copy(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated", category=FutureWarning)
        traced = torch.jit.trace(model, (_example(2, image_size, 0),), check_trace=False)
        traced.save(path)
        if not check:
            return 0.0
        loaded = torch.jit.load(path, map_location="cpu").eval()
    diff = 0.0
    for i, batch in enumerate(check_batch_sizes):
        x = _example(batch, image_size, 1 + i)
        with torch.no_grad():
            diff = max(diff, float((loaded(x) - model(x)).abs().max()))
    return _check(path, diff, atol)


class _EmbedOnly(nn.Module):
    """Holds only the submodules `embed` uses and runs the module class's `embed` on itself: a plain
    nn.Module (no Trainer properties, no head state) that tracing and ONNX export can walk."""

    def __init__(self, module: nn.Module, names: list[str]) -> None:
        super().__init__()
        self._embed_fn = type(module).embed
        for name in names:
            setattr(self, name, getattr(module, name))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self._embed_fn(self, images)


def embedding_only(module: nn.Module, image_size: int = 112) -> nn.Module:
    """An eval-mode copy of backbone + neck: the top-level children of `module` that `module.embed`
    calls (found with forward hooks), behind a forward that is `module.embed`."""
    module = copy.deepcopy(module).cpu().eval()
    called: set[int] = set()
    hooks = [m.register_forward_pre_hook(lambda m, _: called.add(id(m))) for m in module.modules()]
    x = _example(2, image_size, 0)
    try:
        with torch.no_grad():
            want = module.embed(x)
    finally:
        for h in hooks:
            h.remove()
    names = [name for name, child in module.named_children() if any(id(m) in called for m in child.modules())]
    wrapper = _EmbedOnly(module, names).eval()
    try:
        with torch.no_grad():
            got = wrapper(x)
    except AttributeError as err:
        raise RuntimeError(f"{type(module).__name__}.embed uses more than its submodules {names}: {err}") from err
    if not torch.equal(got, want):
        raise RuntimeError(f"{type(module).__name__}.embed gives different outputs on its submodules {names} alone")
    return wrapper


def load_for_export(ckpt_path: str, image_size: int = 112) -> nn.Module:
    """backbone + neck of a checkpoint as an nn.Module whose forward is `module.embed`."""
    from elasticface.eval.embed import load_module

    return embedding_only(load_module(ckpt_path, map_location="cpu"), image_size)


#: output format by file suffix; other suffixes need --format
FORMAT_BY_SUFFIX = {".onnx": "onnx", ".pth": "pth"}


def load_backbone_for_export(path: str, backbone: str | None = None, embedding_size: int | None = None,
                             image_size: int = 112) -> nn.Module:
    """The embedding model of a Lightning checkpoint or a backbone state_dict, as an eval-mode nn.Module."""
    from elasticface.backbones.weights import WeightsError, file_kind
    from elasticface.eval.embed import backbone_from_weights

    kind = file_kind(path)
    if kind == "lightning":
        return load_for_export(path, image_size)
    if kind == "state_dict":
        return backbone_from_weights(path, backbone, embedding_size)
    raise WeightsError(f"{path}: already an exported {kind} model; export needs the weights: a Lightning .ckpt "
                       f"or a backbone state_dict .pth/.pt")


def export_pth(model: nn.Module, path: str) -> int:
    """Write the backbone's plain state_dict (insightface's layout for iresnet*/mobilefacenet*); returns its size."""
    from elasticface.backbones.weights import backbone_state_dict

    backbone = getattr(model, "backbone", model)  # a checkpoint's embed-only wrapper holds `backbone`
    if isinstance(model, _EmbedOnly) and set(dict(model.named_children())) != {"backbone"}:
        raise RuntimeError(f"{path}: the embedding of this model uses more than its backbone "
                           f"({sorted(dict(model.named_children()))}); a backbone state_dict cannot hold it")
    state = backbone_state_dict(backbone)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    torch.save(state, path)
    return len(state)


def main(argv: Sequence[str] | None = None) -> int:
    from elasticface.eval.embed import _hydra_style, add_model_file_arguments

    parser = argparse.ArgumentParser(prog="python -m elasticface.eval.export", description=__doc__.split("\n\n")[0])
    add_model_file_arguments(parser)
    parser.add_argument("--out", help="output path (default: the input's name with .onnx, or .pth for --format pth)")
    parser.add_argument("--format", choices=["onnx", "torchscript", "pth"],
                        help="onnx (dynamic batch), torchscript (a trace) or pth (the backbone's state_dict in "
                             "insightface's layout); default: from --out's suffix (.onnx, .pth), else onnx")
    parser.add_argument("--torchscript", help="also write a TorchScript trace here")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--atol", type=float, default=1e-3, help="fail when ONNX and PyTorch differ by more")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(_hydra_style(sys.argv[1:] if argv is None else argv))
    if args.weights is None:
        parser.error("give the model file: --weights <Lightning .ckpt | backbone state_dict .pth/.pt>")
    suffix = os.path.splitext(args.out)[1].lower() if args.out else ""
    fmt = args.format or FORMAT_BY_SUFFIX.get(suffix) or ("onnx" if not args.out else None)
    if fmt is None:
        parser.error(f"--out {args.out}: give --format onnx|torchscript|pth for a '{suffix}' file")
    model = load_backbone_for_export(args.weights, args.backbone, args.embedding_size, args.image_size)
    out = args.out or os.path.splitext(args.weights)[0] + {"onnx": ".onnx", "pth": ".pth", "torchscript": ".pt"}[fmt]
    if os.path.abspath(out) == os.path.abspath(args.weights):
        parser.error(f"--out {out} is the input file; choose another name")
    if fmt == "onnx":
        diff = export_onnx(model, out, args.opset, args.check, args.image_size, args.atol)
        print(f"wrote {out} (opset {args.opset}, dynamic batch); max abs diff to PyTorch {diff:.3g}")
    elif fmt == "torchscript":
        diff = export_torchscript(model, out, args.check, args.image_size)
        print(f"wrote {out} (TorchScript trace); max abs diff to PyTorch {diff:.3g}")
    else:
        n = export_pth(model, out)
        print(f"wrote {out} (backbone state_dict, {n} tensors, fp32, insightface key layout)")
    if args.torchscript:
        diff = export_torchscript(model, args.torchscript, args.check, args.image_size)
        print(f"wrote {args.torchscript} (TorchScript trace); max abs diff to PyTorch {diff:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
