"""Model files to embedders (a checkpoint, a backbone state_dict, ONNX or TorchScript), and a folder of faces embedded.

The embedding itself is `eval.embedding_loop.embed_dataset`, the one loop every evaluation uses. The command is
`elasticface-embed` (`elasticface.cli.embed`); `python -m elasticface.eval.embed` still runs it.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from elasticface.data.folder import ImageFiles, list_images
from elasticface.eval.embedding_loop import Embedder, embed_dataset, resolve_device
from elasticface.utils.requirements import require_module
from elasticface.utils.errors import BadFile, BadValue, MissingPath

log = logging.getLogger(__name__)


# -- models ----------------------------------------------------------------------------------------------


class TorchScriptRefused(BadFile, ValueError):
    """A TorchScript model file given without allow_torchscript: it is code, not data."""


def load_module(ckpt_path: str, map_location: str | torch.device = "cpu") -> nn.Module:
    """The trained FaceRecognitionModule of a Lightning checkpoint, in eval mode."""
    if not os.path.isfile(ckpt_path):
        raise MissingPath(f"checkpoint {ckpt_path} not found")
    from elasticface.module import FaceRecognitionModule

    return FaceRecognitionModule.load_from_checkpoint(ckpt_path, map_location=map_location).eval()


class ModuleEmbedder(nn.Module):
    """`module.embed` as a plain nn.Module (what export traces and what eval calls). `image_size`: the input size
    the backbone was trained at, where its config says (a backbone built for data.image_size), else None."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        backbone = getattr(module, "hparams", {}).get("backbone") or {}
        self.image_size: int | None = backbone.get("img_size") if hasattr(backbone, "get") else None

    def forward(self, images: Tensor) -> Tensor:
        return self.module.embed(images)


class OnnxEmbedder:
    """An exported ONNX model behind the same call signature as a torch embedder (float32 in, tensor out)."""

    def __init__(self, path: str, device: torch.device | str = "cpu") -> None:
        require_module("onnxruntime", f"the ONNX model {path}", "export", "onnxruntime")
        import onnxruntime as ort

        providers = ["CPUExecutionProvider"]
        if resolve_device(device).type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.path = str(path)
        try:
            self.session = ort.InferenceSession(path, providers=providers)
            inputs = self.session.get_inputs()
        except Exception as err:  # noqa: BLE001 - onnxruntime's errors (InvalidProtobuf, InvalidGraph, Fail, ...)
            raise BadFile(f"{path}: not an ONNX model onnxruntime can load ({type(err).__name__}: "
                          f"{str(err)[:300]})") from err
        if len(inputs) != 1:
            raise BadFile(f"{path}: an ONNX model with {len(inputs)} inputs; expected one, the images")
        self.input_name = inputs[0].name

    def __call__(self, images: Tensor) -> Tensor:
        try:
            out = self.session.run(None, {self.input_name: images.detach().cpu().float().numpy()})[0]
            return torch.from_numpy(out).to(images.device)
        except Exception as err:  # noqa: BLE001 - onnxruntime's errors, or an output that is not numbers
            raise BadFile(f"{self.path}: the ONNX model does not embed images of shape {tuple(images.shape)} "
                          f"({type(err).__name__}: {str(err)[:300]})") from err

    def eval(self) -> "OnnxEmbedder":
        return self

    def to(self, *_: Any, **__: Any) -> "OnnxEmbedder":
        return self


def load_model_file(path: str, device: str | torch.device = "auto", backbone: str | Mapping[str, Any] | None = None,
                    embedding_size: int | None = None, allow_torchscript: bool = False,
                    channels_last: bool | str = "auto") -> Embedder:
    """An embedding function from any model file, its type detected: a Lightning checkpoint, a backbone
    state_dict (.pth/.pt as insightface and ElasticFace release them; ``backbone`` names the architecture,
    else it is inferred), a TorchScript file (only with ``allow_torchscript``: it is a program) or an ONNX
    file (onnxruntime). A torch model runs in the memory layout of ``channels_last`` (see in_layout), on a CPU with
    its BatchNorms folded into the convolutions (`for_cpu_inference`: ONNX Runtime's pace, the same embeddings)."""
    from elasticface.backbones.weights import file_kind
    from elasticface.eval.folded_batch_norm import for_cpu_inference

    device = resolve_device(device)
    kind = file_kind(path)
    if kind == "onnx":
        return OnnxEmbedder(path, device)
    if kind == "torchscript":
        if not allow_torchscript:
            raise TorchScriptRefused(
                f"{path}: a TorchScript file, which is a program: loading it runs the code it holds, so it is not "
                f"opened unless you trust where it comes from and say so with allow_torchscript=true "
                f"(--allow-torchscript). A Lightning .ckpt, a backbone .pth/.pt or an .onnx file needs no option")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated", category=FutureWarning)
            return torch.jit.load(path, map_location=device).eval()
    if kind == "lightning":
        if backbone:
            log.info("%s: a Lightning checkpoint, which names its own backbone; the backbone option is not used", path)
        module = load_module(path, map_location=device)
        embedder = for_cpu_inference(ModuleEmbedder(module), device)
        return in_layout(embedder, module.hparams.backbone.get("name"), device, channels_last)
    from elasticface.backbones.from_weights import backbone_from_weights

    model, report = backbone_from_weights(path, backbone, embedding_size, say=print)
    return in_layout(for_cpu_inference(model, device), report.layout, device, channels_last)


def in_layout(model: nn.Module, architecture: str, device: torch.device, setting: bool | str = "auto") -> nn.Module:
    """The model in NHWC where `setting` says so: `auto` follows the rule training's eager validation follows
    (utils/speed.py: mobilefacenet on a CPU, every family on a GPU), where an eager forward was measured faster
    (MobileFaceNet y1 on one CPU thread: 1.6-1.7x NCHW's faces/s, embeddings equal to 1.6e-6)."""
    from elasticface.utils.speed import backbone_family, check_channels_last_setting, should_use_channels_last

    setting = check_channels_last_setting(setting, "channels_last")
    nhwc = should_use_channels_last(setting, device.type == "cpu", False, backbone_family(architecture))
    if isinstance(model, ModuleEmbedder):  # a checkpoint's module converts its inputs too; its own setting yields
        model.module.channels_last = nhwc
    # a plain backbone: the weights' layout is enough, the convolutions take theirs from them
    model.to(memory_format=torch.channels_last if nhwc else torch.contiguous_format)
    if nhwc:
        log.info("%s: embedded in NHWC (channels_last=%s)", architecture, setting)
    return model.to(device).eval()


def one_model_file(weights: str | None) -> str:
    """The model file given as ``weights``, or an error that says what may be given."""
    if weights in (None, ""):
        raise BadValue("no model file: give weights=<file> (a .ckpt, a backbone .pth/.pt, TorchScript or .onnx)")
    return str(weights)


# -- a folder of aligned faces ---------------------------------------------------------------------------


def embed_folder(
    model: Embedder,
    images: str,
    out: str,
    batch_size: int = 128,
    flip: bool = True,
    normalize: bool = True,
    device: str | torch.device = "auto",
    num_workers: int = 0,
    resize: bool = False,
    max_pixels: int | None = None,
) -> tuple[str, str]:
    """Write `out` (.npy, float32 [N, D], L2-normalised unless `normalize=False`) and `out` with a .txt
    suffix listing the relative image paths, one per line, in row order. Returns both paths. An image whose header
    declares more than ``max_pixels`` (None: the default limit) is an error naming it, raised before decoding."""
    paths = list_images(images)
    files = ImageFiles(images, paths, resize=resize, max_pixels=max_pixels)
    emb, idx = embed_dataset(model, files, batch_size, flip, device, num_workers)
    emb = emb[torch.argsort(idx)]
    if normalize:
        emb = torch.nn.functional.normalize(emb, dim=1)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    np.save(out, emb.numpy().astype(np.float32))
    index_path = os.path.splitext(out)[0] + ".txt"
    with open(index_path, "w") as f:
        f.write("\n".join(paths) + "\n")
    return out, index_path

