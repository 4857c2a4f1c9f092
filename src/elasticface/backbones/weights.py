"""Released backbone weights: read a model file, recognise its architecture, load it strictly, write it back.

insightface's arcface_torch and the official ElasticFace code release plain backbone state_dicts
(``torch.save(backbone.state_dict())``, sometimes with DDP's ``module.`` prefix); this package's
``iresnet*`` and ``mobilefacenet*`` use the same key names, so such a file loads into the same-named
backbone unchanged, and :func:`backbone_state_dict` writes a trained backbone back in that layout.

Every failure is a :class:`WeightsError` that names the file and what was found in it, and every check
here runs before a caller reads any data.
"""

from __future__ import annotations

import logging
import os
import pickle
import pickletools
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from .layout import Layout, _at, layout_of, match_backbone
from .mxnet_params import MXNetParamsError, is_mxnet_params
from .mxnet_zoo import MXNetModelError, mxnet_state_dict
from .registry import FACE_BACKBONES
from elasticface.utils.checksum import file_sha256
from elasticface.utils.remote import refuse_remote
from elasticface.utils.errors import BadFile, MissingPath

log = logging.getLogger(__name__)

__all__ = [
    "Layout",
    "LoadReport",
    "WeightsError",
    "backbone_state_dict",
    "file_kind",
    "file_sha256",
    "infer_backbone",
    "layout_of",
    "load_backbone_weights",
    "match_backbone",
    "open_model_file",
    "read_state_dict",
]

#: a DDP-wrapped model's state_dict keys start with this
DDP_PREFIX = "module."
#: the top-level key that marks a Lightning checkpoint
LIGHTNING_KEY = "pytorch-lightning_version"


class WeightsError(BadFile, ValueError):
    """A model file that cannot be used as asked; the message names the file and what it holds."""


# -- what a file is --------------------------------------------------------------------------------------


def open_model_file(path: str) -> tuple[str, Any]:
    """``(kind, content)``: kind is ``"onnx"``, ``"torchscript"``, ``"lightning"`` (a checkpoint of this project's
    module), ``"mxnet"`` (insightface's MXNet zoo: ``model-0000.params`` with ``model-symbol.json`` beside it) or
    ``"state_dict"``; content: the state_dict (an MXNet model converted to insightface's layout), or None for the
    other kinds (loaded by their own readers).

    TorchScript archives are zip files with a ``code/`` folder and ``constants.pkl``; MXNet parameter files start
    with their NDArray list header; everything else torch wrote is opened with ``torch.load(weights_only=True)``
    (no code runs) and looked at.
    """
    _check_exists(path)
    if str(path).lower().endswith(".onnx"):
        return "onnx", None
    if is_mxnet_params(path):
        try:
            return "mxnet", mxnet_state_dict(path)[0]
        except (MXNetParamsError, MXNetModelError) as err:
            raise WeightsError(str(err)) from err
    if _zipped(path):
        archive = _open_archive(path)
        with archive:
            names = archive.namelist()
            if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
                return "torchscript", None
            # a Lightning checkpoint is told by its top-level key, read off the pickle without unpickling it:
            # its callbacks may hold objects that weights_only loading refuses
            pickled = next((n for n in names if n.endswith("/data.pkl")), None)
            try:
                lightning = pickled is not None and LIGHTNING_KEY.encode() in archive.read(pickled)
            except Exception as err:  # noqa: BLE001 - zipfile raises many types for a damaged archive
                raise WeightsError(f"{path}: a damaged zip archive ({type(err).__name__}: {err}); the file is "
                                   f"truncated or corrupt") from err
            if lightning:
                return "lightning", None
    obj = _torch_load(path)
    if isinstance(obj, Mapping) and "state_dict" in obj and LIGHTNING_KEY in obj:
        return "lightning", None
    return "state_dict", _as_state_dict(obj, path)  # raises for anything else


def file_kind(path: str) -> str:
    """Which kind of model file ``path`` is (see :func:`open_model_file`)."""
    return open_model_file(path)[0]


def _check_exists(path: str) -> None:
    refuse_remote(path, "weights")
    if not os.path.isfile(path):
        raise MissingPath(f"model file {path} not found")


def _zipped(path: str) -> bool:
    """Whether `path` is a zip archive (torch.save's format): its first bytes, or a zip directory at its end."""
    with open(path, "rb") as f:
        if f.read(4) == b"PK\x03\x04":
            return True
    try:
        return zipfile.is_zipfile(path)
    except Exception as err:  # noqa: BLE001 - is_zipfile itself raises on some damaged directories
        raise WeightsError(f"{path}: a damaged zip archive ({type(err).__name__}: {err}); the file is truncated or "
                           f"corrupt") from err


def _open_archive(path: str) -> zipfile.ZipFile:
    """The zip archive at `path` once every entry it lists lies within the file: torch's reader allocates each
    record at the size the archive's directory states, so a corrupt size must not reach it."""
    size = os.path.getsize(path)
    try:
        archive = zipfile.ZipFile(path)
        infos = archive.infolist()
    except Exception as err:  # noqa: BLE001 - zipfile raises many types (BadZipFile, ValueError, struct.error, ...)
        raise WeightsError(f"{path}: a damaged zip archive ({type(err).__name__}: {err}); the file is truncated or "
                           f"corrupt") from err
    for info in infos:
        # stored (torch.save's records): the data is the file's bytes; deflated (TorchScript's debug files): a
        # deflate stream expands at most 1032-fold
        most = info.compress_size if info.compress_type == zipfile.ZIP_STORED else 1032 * info.compress_size + 64
        if info.header_offset + info.compress_size > size or info.file_size > most:
            archive.close()
            raise WeightsError(f"{path}: zip entry {info.filename!r} claims {info.file_size:,} bytes "
                               f"({info.compress_size:,} stored) at offset {info.header_offset:,} of a file of "
                               f"{size:,} bytes; the file is truncated or corrupt")
    return archive


#: torch's legacy (pre-1.6, not zip) format starts with this number, pickled
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
#: bytes per element of the legacy storage types (`torch FloatStorage` -> Float)
_STORAGE_BYTES = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
                  "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16}


def _legacy_storage_bytes(f) -> int:
    """The bytes the storages of a legacy torch file add up to, as its main pickle states them (the element count of
    each `("storage", type, key, location, numel, ...)` persistent id), read by walking the pickle's opcodes with a
    stack of plain values: nothing is built or imported. torch's legacy loader allocates each storage at that size
    before it reads the file's data."""
    for _ in range(3):  # the magic number, the protocol version, the system's sizes
        for _ in pickletools.genops(f):
            pass
    stack: list = []
    marks: list[int] = []
    memo: dict = {}
    total = 0
    for op, arg, _ in pickletools.genops(f):
        if op.name == "MARK":
            marks.append(len(stack))
            continue
        if op.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if arg is None else arg] = stack[-1]
            continue
        if op.name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg))
            continue
        if pickletools.markobject in op.stack_before:
            start = marks.pop()
            items = stack[start:]
            del stack[start:]
            before = op.stack_before.index(pickletools.markobject)
        else:
            items, before = None, len(op.stack_before)
        popped = stack[len(stack) - before:] if before else []
        del stack[len(stack) - before:]
        value = arg if not op.stack_before and len(op.stack_after) == 1 else None
        if op.name == "TUPLE":
            value = tuple(items)
        elif op.name in ("TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"):
            value = tuple(popped)
        elif op.name == "BINPERSID":
            pid = popped[0]
            if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[4], int):
                kind = str(pid[1]).rsplit(" ", 1)[-1].replace("Storage", "")
                total += pid[4] * _STORAGE_BYTES.get(kind, 1)
        stack.extend([value] * len(op.stack_after))
    return total


def check_torch_file(path: str) -> None:
    """Before `torch.load`, no size the file states may exceed the file: a zip archive (what torch.save writes)
    whose entries claim more than the file holds, or a legacy file whose storages add up to more than it holds, is
    refused (WeightsError naming the file)."""
    if _zipped(path):
        _open_archive(path).close()
        return
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        try:
            first = next(pickletools.genops(f), (None, None, None))
            if first[0] is None or first[0].name != "PROTO":
                return
            magic = next(pickletools.genops(f), (None, None, None))[1]
            if magic != _LEGACY_MAGIC:
                return
            f.seek(0)
            claimed = _legacy_storage_bytes(f)
        except Exception:  # noqa: BLE001 - a pickle this walk cannot follow: torch.load itself will say what it is
            return
    if claimed > size:
        raise WeightsError(f"{path}: a legacy torch file whose storages claim {claimed:,} bytes, more than the file's "
                           f"{size:,}; the file is truncated or corrupt")


def _torch_load(path: str) -> Any:
    check_torch_file(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        text = str(err)
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if found:
            raise WeightsError(
                f"{path}: holds a pickled Python object ({found.group(1)}), not a state_dict of tensors; it was "
                f"saved with torch.save(model): save torch.save(model.state_dict(), ...) instead"
            ) from err
        raise WeightsError(f"{path}: not a file torch.save wrote ({text.splitlines()[0]})") from err
    except Exception as err:  # noqa: BLE001 - torch's readers raise many types (IndexError, KeyError, ...) on a corrupt file
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise WeightsError(
            f"{path}: cannot be read by torch.load ({type(err).__name__}: {first}); the file is truncated or "
            f"corrupt, or not a torch file"
        ) from err


def _lightning_as_weights(path: str) -> WeightsError:
    return WeightsError(
        f"{path}: a Lightning checkpoint (the whole training state: model, class centres, optimizer), not a backbone "
        f"state_dict. To continue that run use ckpt_path=; to start a new run from its backbone write it out first: "
        f"elasticface-export --weights {path} --format pth --out backbone.pth"
    )


def _describe_object(obj: Any) -> str:
    if isinstance(obj, Mapping):
        keys = list(obj)[:6]
        return f"a dict with keys {keys}{' ...' if len(obj) > 6 else ''}"
    return f"a {type(obj).__module__}.{type(obj).__name__}"


def _as_state_dict(obj: Any, path: str) -> dict[str, Tensor]:
    if isinstance(obj, Mapping) and "state_dict" in obj and LIGHTNING_KEY in obj:
        raise _lightning_as_weights(path)
    if not isinstance(obj, Mapping) or not obj:
        raise WeightsError(f"{path}: expected a state_dict (a dict of parameter name -> tensor), "
                           f"found {_describe_object(obj)}")
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        example = bad[0]
        raise WeightsError(
            f"{path}: expected a state_dict (a dict of parameter name -> tensor), found {_describe_object(obj)} whose "
            f"entry {example!r} is a {type(obj[example]).__name__}"
        )
    return dict(obj)


def read_state_dict(path: str) -> tuple[dict[str, Tensor], str]:
    """The backbone state_dict in ``path`` with DDP's ``module.`` prefix removed, and the prefix removed ("" if none).

    Refuses TorchScript, ONNX, Lightning checkpoints, whole pickled models and truncated files, naming
    the file and what it holds.
    """
    kind, obj = open_model_file(path)
    if kind == "lightning":
        raise _lightning_as_weights(path)
    if kind == "mxnet":
        return dict(obj), ""
    if kind in ("onnx", "torchscript"):
        raise WeightsError(
            f"{path}: an exported {kind} model, not a state_dict; eval.py and embed run it as it is (weights=...), "
            f"but training and export need the weights: pass the backbone's .pth state_dict or a Lightning .ckpt"
        )
    state = _as_state_dict(obj, path)
    prefix = ""
    if all(k.startswith(DDP_PREFIX) for k in state):
        prefix = DDP_PREFIX
        state = {k[len(DDP_PREFIX):]: v for k, v in state.items()}
    return state, prefix


# -- which architecture a state_dict is ------------------------------------------------------------------


def infer_backbone(state: Mapping[str, Tensor], path: str) -> str:
    """The backbone name for a state_dict whose architecture the caller did not name."""
    layout = layout_of(state)
    name = match_backbone(layout)
    if name is None:
        hint = (" ElasticFace's SE=True models have squeeze-excitation blocks that this project's iresnets do not; "
                "use their SE=False release." if layout.se else "")
        raise WeightsError(
            f"{path}: cannot tell which backbone this state_dict is for: it looks like {layout}, which matches none "
            f"of {', '.join(FACE_BACKBONES)}.{hint} Name it with backbone=<option> "
            f"(or model.backbone.name=<timm model>)"
        )
    return name


# -- loading into a model --------------------------------------------------------------------------------


@dataclass
class LoadReport:
    """What :func:`load_backbone_weights` did: for logs and summary.json."""

    path: str
    sha256: str
    layout: str
    strict: bool
    prefix_removed: str = ""
    loaded: int = 0
    skipped: dict[str, list[str]] = field(default_factory=dict)  # missing / unexpected / shape mismatch

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.path, "sha256": self.sha256, "layout": self.layout, "strict": self.strict,
                "prefix_removed": self.prefix_removed, "loaded_tensors": self.loaded,
                "skipped": {k: v for k, v in self.skipped.items() if v}}


def _first(keys: list[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" (+{len(keys) - n} more)" if len(keys) > n else "") if keys else "none"


def _model_name(model: nn.Module) -> str:
    return getattr(model, "name", "") or (getattr(model, "pretrained_cfg", None) or {}).get("architecture") \
        or type(model).__name__


def _timm_body_target(model: nn.Module, state: dict[str, Tensor]) -> tuple[nn.Module, dict[str, Tensor], list[str]]:
    """A TimmEmbedder given the timm model's own weights (no ``body.``/``neck.`` keys): load them into the body,
    without the ImageNet classifier the headless body does not have."""
    body = model.body
    own = body.state_dict()
    classifier = [k for k in state if k not in own and re.match(r"^(fc|head|classifier|head\.fc)\.(weight|bias)$", k)]
    return body, {k: v for k, v in state.items() if k not in classifier}, classifier


def load_backbone_weights(model: nn.Module, path: str, strict: bool = True,
                          state: tuple[dict[str, Tensor], str] | None = None) -> LoadReport:
    """Load a released (or exported) backbone state_dict from ``path`` into ``model`` (in place).

    strict: every tensor of the model must be in the file with its shape and nothing else may be there;
    otherwise the matching tensors are loaded and the rest is reported (and logged) as skipped. A
    different embedding size or ElasticFace SE blocks are errors either way. ``state``: what
    :func:`read_state_dict` returned for ``path``, when the caller has already read it.
    """
    state, prefix = state if state is not None else read_state_dict(path)
    file_layout = layout_of(state)
    target, skipped_classifier = model, []
    from .neck import TimmEmbedder

    if isinstance(model, TimmEmbedder) and not any(k.startswith(("body.", "neck.")) for k in state):
        target, state, skipped_classifier = _timm_body_target(model, state)
    want = target.state_dict()
    name = _model_name(model)
    model_layout = layout_of(model.state_dict())
    embedding = getattr(model, "embedding_size", None)
    same_architecture = _at(file_layout, None) == _at(model_layout, None)  # then only the embedding size may differ
    if file_layout.embedding_size is not None and embedding is not None and file_layout.embedding_size != embedding \
            and same_architecture:
        raise WeightsError(
            f"{path}: holds a {file_layout.embedding_size}-d embedding ({file_layout}) but the model is built with "
            f"model.embedding_size={embedding}; set model.embedding_size={file_layout.embedding_size}"
        )
    if file_layout.se and not model_layout.se:
        raise WeightsError(
            f"{path}: an ElasticFace SE=True model ({file_layout}: squeeze-excitation keys such as "
            f"{next(k for k in state if '.se_block.' in k)}), but {name} has no SE blocks; use the SE=False release"
        )
    missing = [k for k in want if k not in state]
    unexpected = [k for k in state if k not in want]
    mismatched = [f"{k} {tuple(state[k].shape)} vs {tuple(want[k].shape)}" for k in want
                  if k in state and state[k].shape != want[k].shape]
    if strict and (missing or unexpected or mismatched):
        looks = match_backbone(file_layout)
        raise WeightsError(
            f"{path}: does not fit {name} (strict loading). The file looks like "
            f"{looks + ' (' + str(file_layout) + ')' if looks else file_layout}; the model is {model_layout}. "
            f"Missing keys: {_first(missing)}. Unexpected keys: {_first(unexpected)}. Shape mismatches: "
            f"{_first(mismatched)}. Name the matching architecture with backbone=<option> (train.py: "
            f"weights_strict=false loads what fits)"
        )
    usable = {k: v for k, v in state.items() if k in want and v.shape == want[k].shape}
    target.load_state_dict(usable, strict=strict)
    report = LoadReport(os.path.abspath(path), file_sha256(path), str(file_layout), strict, prefix, len(usable),
                        {"missing": missing, "unexpected": unexpected, "shape_mismatch": mismatched,
                         "timm_classifier": skipped_classifier})
    if any(report.skipped.values()):
        log.warning("weights %s: loaded %d tensors into %s; skipped: missing %s; unexpected %s; shape mismatch %s; "
                    "timm classifier %s", path, len(usable), name, _first(missing), _first(unexpected),
                    _first(mismatched), _first(skipped_classifier))
    return report


# -- writing ---------------------------------------------------------------------------------------------


def backbone_state_dict(backbone: nn.Module) -> dict[str, Tensor]:
    """The backbone's plain state_dict as insightface saves it: no wrapper prefix, fp32 on the CPU, no classifier.

    For ``iresnet*`` and ``mobilefacenet*`` the keys are insightface's, so ``get_model(name).load_state_dict``
    takes the file strictly; for other timm models they are this project's ``body.*`` / ``neck.*``.
    """
    out: dict[str, Tensor] = {}
    for key, value in backbone.state_dict().items():
        if key.startswith("head."):  # the optional timm classifier (num_classes > 0), never part of the embedder
            continue
        value = value.detach().to("cpu")
        out[key] = (value.float() if value.is_floating_point() else value).contiguous().clone()
    return out
