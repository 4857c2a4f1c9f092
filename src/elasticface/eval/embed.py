"""Embedding extraction: load a model (checkpoint, ONNX or TorchScript) and embed images in batches.

Every evaluation (verification sets, IJB-B/C, a folder of faces) goes through `embed_dataset`: the
training normalisation (`data.transforms.normalize`), the protocol's flip fusion
(`metrics.verification.flip_fused_embeddings`, the one training validation uses) and eval mode.

CLI: embed a folder of aligned 112x112 faces into a `.npy` plus an index of relative paths::

    python -m elasticface.eval.embed --ckpt last.ckpt --images faces/ --out emb.npy
    python -m elasticface.eval.embed ckpt_path=last.ckpt images=faces/ out=emb.npy   # Hydra-style
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from elasticface.data.folder import ImageFiles, list_images
from elasticface.data import transforms
from elasticface.metrics.verification import VerificationAccuracy, flip_fused_embeddings

log = logging.getLogger(__name__)

Embedder = Callable[[Tensor], Tensor]


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# -- models ----------------------------------------------------------------------------------------------


def load_module(ckpt_path: str, map_location: str | torch.device = "cpu") -> nn.Module:
    """The trained FaceRecognitionModule of a Lightning checkpoint, in eval mode."""
    if not os.path.isfile(ckpt_path):
        raise FileNotFoundError(f"checkpoint {ckpt_path} not found")
    from elasticface.module import FaceRecognitionModule

    return FaceRecognitionModule.load_from_checkpoint(ckpt_path, map_location=map_location).eval()


class ModuleEmbedder(nn.Module):
    """`module.embed` as a plain nn.Module (what export traces and what eval calls)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, images: Tensor) -> Tensor:
        return self.module.embed(images)


class OnnxEmbedder:
    """An exported ONNX model behind the same call signature as a torch embedder (float32 in, tensor out)."""

    def __init__(self, path: str, device: torch.device | str = "cpu") -> None:
        import onnxruntime as ort

        providers = ["CPUExecutionProvider"]
        if resolve_device(device).type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(path, providers=providers)
        self.input_name = self.session.get_inputs()[0].name

    def __call__(self, images: Tensor) -> Tensor:
        out = self.session.run(None, {self.input_name: images.detach().cpu().float().numpy()})[0]
        return torch.from_numpy(out).to(images.device)

    def eval(self) -> "OnnxEmbedder":
        return self

    def to(self, *_: Any, **__: Any) -> "OnnxEmbedder":
        return self


def load_embedder(ckpt_path: str | None = None, model_path: str | None = None, device: str | torch.device = "auto") -> Embedder:
    """An embedding function from a Lightning checkpoint (`ckpt_path`) or an exported model (`model_path`:
    `.onnx` through onnxruntime, anything else through `torch.jit.load`)."""
    device = resolve_device(device)
    if (ckpt_path is None) == (model_path is None):
        raise ValueError(f"give exactly one of ckpt_path ({ckpt_path}) and model_path ({model_path})")
    if ckpt_path is not None:
        return ModuleEmbedder(load_module(ckpt_path, map_location=device)).to(device).eval()
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"exported model {model_path} not found")
    if str(model_path).endswith(".onnx"):
        return OnnxEmbedder(model_path, device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated", category=FutureWarning)
        return torch.jit.load(model_path, map_location=device).eval()


# -- batched embedding -----------------------------------------------------------------------------------


@torch.no_grad()
def embed_dataset(
    model: Embedder,
    dataset: Dataset,
    batch_size: int = 128,
    flip: bool = True,
    device: str | torch.device = "auto",
    num_workers: int = 0,
) -> tuple[Tensor, Tensor]:
    """Embed a dataset whose items are `(uint8 [3, H, W], index)`: returns (float32 [N, D] on CPU, indices).

    An nn.Module model is moved to `device` and put in eval mode (restored to train mode afterwards)."""
    device = resolve_device(device)
    was_training = isinstance(model, nn.Module) and model.training
    if isinstance(model, nn.Module):
        model.to(device).eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, pin_memory=device.type == "cuda")
    embeddings, indices = [], []
    try:
        for images, idx in loader:
            x = transforms.normalize(images.to(device, non_blocking=True))
            embeddings.append(flip_fused_embeddings(model, x, flip).cpu())
            indices.append(torch.as_tensor(idx).long())
    finally:
        if was_training:
            model.train()
    if not embeddings:
        raise ValueError(f"dataset {getattr(dataset, 'name', type(dataset).__name__)} is empty")
    return torch.cat(embeddings), torch.cat(indices)


def evaluate_pair_set(
    model: Embedder,
    pairs: Any,
    batch_size: int = 128,
    flip: bool = True,
    device: str | torch.device = "auto",
    num_workers: int = 0,
    num_folds: int = 10,
    far_target: float = 1e-3,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The verification protocol on a `PairSet`: (scalar results, curves for plots)."""
    emb, idx = embed_dataset(model, pairs, batch_size, flip, device, num_workers)
    metric = VerificationAccuracy(pairs.issame, num_folds=num_folds, far_target=far_target)
    metric.update(emb, idx)
    result = {k: float(v) for k, v in metric.compute().items()}
    return result, metric.roc_data()


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
) -> tuple[str, str]:
    """Write `out` (.npy, float32 [N, D], L2-normalised unless `normalize=False`) and `out` with a .txt
    suffix listing the relative image paths, one per line, in row order. Returns both paths."""
    paths = list_images(images)
    emb, idx = embed_dataset(model, ImageFiles(images, paths, resize=resize), batch_size, flip, device, num_workers)
    emb = emb[torch.argsort(idx)]
    if normalize:
        emb = torch.nn.functional.normalize(emb, dim=1)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    np.save(out, emb.numpy().astype(np.float32))
    index_path = os.path.splitext(out)[0] + ".txt"
    with open(index_path, "w") as f:
        f.write("\n".join(paths) + "\n")
    return out, index_path


def _hydra_style(argv: Sequence[str]) -> list[str]:
    """Accept `key=value` arguments next to `--key value` (ckpt_path= is --ckpt, model_path= is --model)."""
    alias = {"ckpt_path": "ckpt", "model_path": "model", "batch_size": "batch-size", "num_workers": "num-workers"}
    out = []
    for a in argv:
        if not a.startswith("-") and "=" in a:
            key, value = a.split("=", 1)
            key = alias.get(key, key).replace("_", "-")
            if value.lower() in ("true", "false") and key in ("flip", "normalize", "resize"):
                out.append(f"--{key}" if value.lower() == "true" else f"--no-{key}")
            else:
                out += [f"--{key}", value]
        else:
            out.append(a)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m elasticface.eval.embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", help="Lightning checkpoint of a FaceRecognitionModule")
    parser.add_argument("--model", help="exported model (.onnx or TorchScript) instead of --ckpt")
    parser.add_argument("--images", required=True, help="folder of aligned 112x112 faces (searched recursively)")
    parser.add_argument("--out", required=True, help="output .npy; the index goes to the same name with .txt")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--flip", action=argparse.BooleanOptionalAction, default=True, help="add the flipped image's embedding")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=True, help="L2-normalise the rows")
    parser.add_argument("--resize", action=argparse.BooleanOptionalAction, default=False, help="resize images that are not 112x112")
    args = parser.parse_args(_hydra_style(sys.argv[1:] if argv is None else argv))
    if (args.ckpt is None) == (args.model is None):
        parser.error("give exactly one of --ckpt and --model")
    model = load_embedder(args.ckpt, args.model, args.device)
    out, index = embed_folder(model, args.images, args.out, args.batch_size, args.flip, args.normalize,
                              args.device, args.num_workers, args.resize)
    print(f"wrote {out} and {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
