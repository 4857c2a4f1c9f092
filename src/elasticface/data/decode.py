"""Image decoding shared by every face source: bytes -> uint8 [3, S, S] RGB tensor.

torchvision's libjpeg-turbo `decode_jpeg` is the fast path (no PIL image object, no extra copy);
anything it cannot read (PNG, BMP, odd JPEG variants) falls back to PIL. Grey and CMYK images
become RGB; images that are not S x S are resized and counted, because a training set of mixed
sizes usually means the faces were not aligned the way the model expects.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

log = logging.getLogger(__name__)

DECODERS = ("torchvision", "pil", "dali")
_JPEG_SOI = b"\xff\xd8"


class CorruptImageError(ValueError):
    """The bytes are not an image that any available decoder can read."""


@dataclass
class DecodeStats:
    """Per-process counters; a dataset owns one so workers count independently."""

    decoded: int = 0
    resized: int = 0
    grey: int = 0
    fallback: int = 0


def _check_decoder(decoder: str) -> str:
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder '{decoder}'; expected one of {DECODERS}")
    # DALI decodes on the GPU inside its own pipeline (elasticface.data.dali); per-item access
    # (labels, debugging, validation) still needs a CPU decoder, so use the fast CPU one.
    return "torchvision" if decoder == "dali" else decoder


def _decode_pil(data: bytes, stats: DecodeStats) -> torch.Tensor:
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.mode in ("L", "LA", "I", "I;16", "1"):
                stats.grey += 1
            # convert() forces the full decode, so truncated files fail here rather than later
            arr = np.array(img.convert("RGB"))
    except Exception as exc:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        raise CorruptImageError(f"cannot decode image ({len(data)} bytes): {exc}") from exc
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


def _decode_torchvision(data: bytes, stats: DecodeStats) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_jpeg

    if not data[:2] == _JPEG_SOI:
        stats.fallback += 1
        return _decode_pil(data, stats)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        out = decode_jpeg(buf, mode=ImageReadMode.UNCHANGED)
        if out.shape[0] == 1:
            stats.grey += 1
            out = out.expand(3, -1, -1).contiguous()
        elif out.shape[0] != 3:  # CMYK and friends: let libjpeg-turbo do the colour conversion
            out = decode_jpeg(buf, mode=ImageReadMode.RGB)
    except RuntimeError:
        # libjpeg-turbo refuses some files PIL accepts (and vice versa); PIL gets the last word,
        # so a record is only called corrupt when both fail.
        stats.fallback += 1
        return _decode_pil(data, stats)
    return out


def resize_uint8(img: torch.Tensor, size: int) -> torch.Tensor:
    """Antialiased bilinear resize of a uint8 [3, H, W] tensor to [3, size, size]."""
    from torchvision.transforms.v2 import functional as F

    return F.resize(img, [size, size], antialias=True)


def decode_image(
    data: bytes | bytearray | memoryview | np.ndarray,
    decoder: str = "torchvision",
    image_size: int | None = 112,
    stats: DecodeStats | None = None,
) -> torch.Tensor:
    """Decode encoded image bytes to a uint8 [3, S, S] RGB tensor; raise CorruptImageError if unreadable."""
    decoder = _check_decoder(decoder)
    stats = stats if stats is not None else DecodeStats()
    if isinstance(data, np.ndarray):
        data = data.tobytes()
    data = bytes(data)
    if len(data) == 0:
        raise CorruptImageError("empty image payload")
    img = _decode_torchvision(data, stats) if decoder == "torchvision" else _decode_pil(data, stats)
    stats.decoded += 1
    return _fit(img, image_size, stats)


def array_to_tensor(arr: np.ndarray, image_size: int | None = 112, stats: DecodeStats | None = None) -> torch.Tensor:
    """An already decoded HWC (or HW grey) uint8 array -> uint8 [3, S, S] tensor."""
    stats = stats if stats is not None else DecodeStats()
    arr = np.asarray(arr)
    if arr.dtype != np.uint8:
        raise CorruptImageError(f"expected a uint8 image array, got {arr.dtype}")
    if arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] == 1):
        stats.grey += 1
        arr = np.repeat(arr.reshape(arr.shape[0], arr.shape[1], 1), 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise CorruptImageError(f"expected an HWC image array, got shape {arr.shape}")
    img = torch.from_numpy(np.ascontiguousarray(arr[:, :, :3])).permute(2, 0, 1).contiguous()
    return _fit(img, image_size, stats)


def _fit(img: torch.Tensor, image_size: int | None, stats: DecodeStats) -> torch.Tensor:
    if image_size is not None and (img.shape[1] != image_size or img.shape[2] != image_size):
        stats.resized += 1
        if stats.resized == 1 or (stats.resized & (stats.resized - 1)) == 0:
            # log the 1st, 2nd, 4th, 8th ... occurrence: visible, but never floods a long run's log
            log.warning(
                "resized %d image(s) to %dx%d so far (latest was %dx%d); aligned faces are expected at %dx%d",
                stats.resized, image_size, image_size, img.shape[1], img.shape[2], image_size, image_size,
            )
        img = resize_uint8(img, image_size)
    return img


def image_format(data: bytes) -> str:
    """Cheap format sniffing for file extensions (jpg, png, bmp, ...); 'bin' when unknown."""
    if data[:2] == _JPEG_SOI:
        return "jpg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "bin"


def encode_jpeg(img: np.ndarray | torch.Tensor, quality: int = 95) -> bytes:
    """HWC RGB uint8 array (or [3, H, W] tensor) -> JPEG bytes, via PIL (portable, deterministic)."""
    if isinstance(img, torch.Tensor):
        img = img.permute(1, 2, 0).cpu().numpy()
    arr = np.asarray(img)
    if arr.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {arr.dtype}")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
