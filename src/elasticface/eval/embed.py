"""Embedding extraction: load a model file (checkpoint, backbone state_dict, ONNX or TorchScript) and embed images.

Every evaluation (verification sets, IJB-B/C, a folder of faces) goes through `embed_dataset`: the
training normalisation (`data.transforms.normalize`), the protocol's flip fusion
(`metrics.verification.flip_fused_embeddings`, the one training validation uses) and eval mode.

CLI: embed a folder of aligned 112x112 faces into a `.npy` plus an index of relative paths::

    python -m elasticface.eval.embed --weights last.ckpt --images faces/ --out emb.npy
    python -m elasticface.eval.embed --weights 295672backbone.pth --backbone iresnet100 --images faces/ --out emb.npy
    python -m elasticface.eval.embed weights=last.ckpt images=faces/ out=emb.npy   # Hydra-style

``--weights`` takes any model file, its type detected (``--ckpt`` and ``--model`` are the same option).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from typing import Any, Callable, Mapping, Sequence

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


def backbone_from_weights(path: str, backbone: str | Mapping[str, Any] | None = None,
                          embedding_size: int | None = None) -> nn.Module:
    """A backbone built for a released state_dict and loaded from it strictly, in eval mode.

    backbone: the architecture (a name, or the ``model.backbone`` config of ``backbone=<option>``); None
    infers it from the tensors and says which it chose. embedding_size: None takes the file's.
    """
    from hydra.utils import instantiate

    from elasticface.backbones.build import build_backbone
    from elasticface.backbones.weights import infer_backbone, layout_of, load_backbone_weights, read_state_dict

    state = read_state_dict(path)
    layout = layout_of(state[0])
    spec: dict[str, Any] = dict(backbone) if isinstance(backbone, Mapping) else ({"name": backbone} if backbone else {})
    if not spec.get("name"):
        spec["name"] = infer_backbone(state[0], path)
        print(f"{path}: architecture inferred from its tensors: {spec['name']} ({layout}); "
              f"name it with backbone=<option> to skip the guess")
    spec["embedding_size"] = embedding_size or layout.embedding_size or spec.get("embedding_size") or 512
    if "_target_" in spec:
        model = instantiate(spec)
    else:
        model = build_backbone(**spec)
    load_backbone_weights(model, path, strict=True, state=state)
    return model.eval()


def load_model_file(path: str, device: str | torch.device = "auto", backbone: str | Mapping[str, Any] | None = None,
                    embedding_size: int | None = None) -> Embedder:
    """An embedding function from any model file, its type detected: a Lightning checkpoint, a backbone
    state_dict (.pth/.pt as insightface and ElasticFace release them; ``backbone`` names the architecture,
    else it is inferred), a TorchScript file or an ONNX file (onnxruntime)."""
    from elasticface.backbones.weights import file_kind

    device = resolve_device(device)
    kind = file_kind(path)
    if kind == "onnx":
        return OnnxEmbedder(path, device)
    if kind == "torchscript":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated", category=FutureWarning)
            return torch.jit.load(path, map_location=device).eval()
    if kind == "lightning":
        if backbone:
            log.info("%s: a Lightning checkpoint, which names its own backbone; the backbone option is not used", path)
        return ModuleEmbedder(load_module(path, map_location=device)).to(device).eval()
    return backbone_from_weights(path, backbone, embedding_size).to(device)


def one_model_file(**options: str | None) -> str:
    """The model file of a command that accepts it under several names (weights, ckpt_path, model_path)."""
    given = {k: str(v) for k, v in options.items() if v not in (None, "")}
    if not given:
        raise ValueError(f"no model file: give {' or '.join(options)}=<file> (a .ckpt, a backbone .pth/.pt, "
                         f"TorchScript or .onnx)")
    if len(set(given.values())) > 1:
        raise ValueError(f"two model files: {', '.join(f'{k}={v}' for k, v in given.items())}; give one")
    return next(iter(given.values()))


def load_embedder(ckpt_path: str | None = None, model_path: str | None = None, device: str | torch.device = "auto",
                  weights: str | None = None, backbone: str | Mapping[str, Any] | None = None,
                  embedding_size: int | None = None) -> Embedder:
    """:func:`load_model_file` of the one file given as ``weights`` (or its older names ``ckpt_path``, ``model_path``)."""
    path = one_model_file(weights=weights, ckpt_path=ckpt_path, model_path=model_path)
    return load_model_file(path, device, backbone, embedding_size)


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
    """Accept `key=value` arguments next to `--key value` (weights=, ckpt_path= and model_path= are --weights)."""
    alias = {"ckpt_path": "weights", "model_path": "weights", "batch_size": "batch-size", "num_workers": "num-workers"}
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


def add_model_file_arguments(parser: argparse.ArgumentParser) -> None:
    """The model-file options embed and export share: one file, its type detected, and its architecture."""
    parser.add_argument("--weights", "--ckpt", "--model", dest="weights",
                        help="model file: Lightning .ckpt, backbone state_dict .pth/.pt (insightface / ElasticFace "
                             "layout, `module.` prefix or not), TorchScript or .onnx; --ckpt and --model are the same")
    parser.add_argument("--backbone", help="architecture of a state_dict (iresnet100, mobilefacenet, any timm name); "
                                           "default: inferred from its tensors")
    parser.add_argument("--embedding-size", type=int, help="embedding size of a state_dict (default: the file's)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m elasticface.eval.embed", description=__doc__.split("\n\n")[0])
    add_model_file_arguments(parser)
    parser.add_argument("--images", required=True, help="folder of aligned 112x112 faces (searched recursively)")
    parser.add_argument("--out", required=True, help="output .npy; the index goes to the same name with .txt")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--flip", action=argparse.BooleanOptionalAction, default=True, help="add the flipped image's embedding")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=True, help="L2-normalise the rows")
    parser.add_argument("--resize", action=argparse.BooleanOptionalAction, default=False, help="resize images that are not 112x112")
    args = parser.parse_args(_hydra_style(sys.argv[1:] if argv is None else argv))
    if args.weights is None:
        parser.error("give the model file: --weights <.ckpt | backbone .pth/.pt | TorchScript | .onnx>")
    model = load_model_file(args.weights, args.device, args.backbone, args.embedding_size)
    out, index = embed_folder(model, args.images, args.out, args.batch_size, args.flip, args.normalize,
                              args.device, args.num_workers, args.resize)
    print(f"wrote {out} and {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
