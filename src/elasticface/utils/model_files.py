"""What a model file is, told by its first bytes before anything reads it in full.

A text file, an image or a half-downloaded archive given as `weights=` is named as "not a model file" in one line,
before any model is built, instead of a traceback from torch's unpickler twenty seconds in. Only the formats the
project reads pass: torch's zip archive (torch.save, Lightning checkpoints, TorchScript), torch's legacy pickle,
insightface's MXNet `.params` (NDArray list) and ONNX (a protobuf ModelProto). What the file holds inside is the
readers' business (backbones/weights.py, untrusted.py, eval/embed.py).
"""

from __future__ import annotations

import os
import zipfile

from elasticface.utils.errors import BadFile, MissingPath

#: the formats this project reads, as the one-line error lists them
MODEL_FORMATS = ("a Lightning .ckpt", "a backbone .pth/.pt (torch.save)", "TorchScript", "insightface's MXNet "
                 "model-0000.params", "ONNX .onnx")
ZIP_MAGIC = b"PK\x03\x04"
#: torch.save's legacy (pre-1.6) format: a protocol-2 pickle whose first object is torch's magic number
LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
#: MXNet's NDArray list file: uint64 0x112, little-endian
MXNET_MAGIC = (0x112).to_bytes(8, "little")
#: ONNX ModelProto fields a file starts with: ir_version (1, varint), producer_name (2), graph (7), opset_import (8)
ONNX_FIRST_TAGS = (0x08, 0x12, 0x3A, 0x42)


def model_file_kind(path: str | os.PathLike, key: str = "weights") -> str:
    """``"torch-zip"``, ``"torchscript"``, ``"torch-legacy"``, ``"mxnet"`` or ``"onnx"``; a missing path or a file of
    another kind is a one-line error naming ``key`` and the file."""
    text = os.fspath(path)
    if not os.path.exists(text):
        raise MissingPath(f"{key}={text}: no such file; give the path of a model file ({', '.join(MODEL_FORMATS)})")
    if os.path.isdir(text):
        raise BadFile(f"{key}={text}: a folder, not a model file; give the file itself "
                      f"(for MXNet: .../model-0000.params, with model-symbol.json beside it)")
    try:
        with open(text, "rb") as f:
            head = f.read(16)
    except OSError as err:
        raise BadFile(f"{key}={text}: cannot be read ({err.strerror or err})") from None
    if head.startswith(ZIP_MAGIC):
        return _zip_kind(text, key)
    if head.startswith(LEGACY_TORCH_MAGIC):
        return "torch-legacy"
    if head.startswith(MXNET_MAGIC):
        return "mxnet"
    if text.lower().endswith(".onnx") and head[:1] and head[0] in ONNX_FIRST_TAGS:
        return "onnx"
    size = os.path.getsize(text)
    raise BadFile(f"{key}={text}: not a model file ({_describe(head, size)}); expected one of: "
                  f"{', '.join(MODEL_FORMATS)}")


def _zip_kind(path: str, key: str) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except Exception as err:  # noqa: BLE001 - zipfile raises many types (BadZipFile, NotImplementedError, struct.error)
        raise BadFile(f"{key}={path}: a zip archive that cannot be opened ({err}); the file is truncated or "
                      f"corrupt: copy or download it again") from None
    if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        return "torchscript"
    if not any(n.endswith("data.pkl") for n in names):
        raise BadFile(f"{key}={path}: a zip archive without data.pkl, so not one torch.save wrote; expected one of: "
                      f"{', '.join(MODEL_FORMATS)}")
    return "torch-zip"


def _describe(head: bytes, size: int) -> str:
    """What the first bytes look like, for the error line."""
    if size == 0:
        return "an empty file"
    if head.startswith((b"\xff\xd8\xff", b"\x89PNG")):
        return "an image"
    if head.startswith(b"{") or head.startswith(b"["):
        return "JSON text"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and all(c.isprintable() or c in "\r\n\t" for c in text):
        return f"text starting {text[:12]!r}"
    return f"{size:,} bytes starting {head[:8].hex(' ')}"
