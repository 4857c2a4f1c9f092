"""What an export writes: the embedding part of a model file (backbone + neck, i.e. `module.embed`), a plain
nn.Module that tracing and the ONNX exporter can walk."""

from __future__ import annotations

import copy

import torch
from torch import nn

from elasticface.export.check import example_input


class EmbedOnly(nn.Module):
    """Holds only the submodules `embed` uses and runs the module class's `embed` on itself: a plain
    nn.Module (no Trainer properties, no head state) that tracing and ONNX export can walk."""

    def __init__(self, module: nn.Module, names: list[str]) -> None:
        super().__init__()
        self._embed_fn = type(module).embed
        for name in names:
            setattr(self, name, getattr(module, name))
        # and the plain settings `embed` reads (e.g. `channels_last`), never another submodule or tensor
        for key, value in vars(module).items():
            if not key.startswith("_") and isinstance(value, (bool, int, float, str)):
                setattr(self, key, value)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self._embed_fn(self, images)


def embedding_only(module: nn.Module, image_size: int = 112) -> nn.Module:
    """An eval-mode copy of backbone + neck: the top-level children of `module` that `module.embed`
    calls (found with forward hooks), behind a forward that is `module.embed`."""
    module = copy.deepcopy(module).cpu().eval()
    called: set[int] = set()
    hooks = [m.register_forward_pre_hook(lambda m, _: called.add(id(m))) for m in module.modules()]
    x = example_input(2, image_size, 0)
    try:
        with torch.no_grad():
            want = module.embed(x)
    finally:
        for h in hooks:
            h.remove()
    names = [name for name, child in module.named_children() if any(id(m) in called for m in child.modules())]
    wrapper = EmbedOnly(module, names).eval()
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


def load_backbone_for_export(path: str, backbone: str | None = None, embedding_size: int | None = None,
                             image_size: int = 112) -> nn.Module:
    """The embedding model of a Lightning checkpoint, a backbone state_dict or an MXNet zoo model, as an eval-mode
    nn.Module."""
    from elasticface.backbones.from_weights import backbone_from_weights
    from elasticface.backbones.weights import WeightsError, file_kind

    kind = file_kind(path)
    if kind == "lightning":
        return load_for_export(path, image_size)
    if kind in ("state_dict", "mxnet"):
        return backbone_from_weights(path, backbone, embedding_size, say=print)[0].eval()
    raise WeightsError(f"{path}: already an exported {kind} model; export needs the weights: a Lightning .ckpt "
                       f"or a backbone state_dict .pth/.pt")
