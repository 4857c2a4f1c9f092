"""Image decoding shared by every face source: bytes -> uint8 [3, S, S] RGB tensor.

torchvision's libjpeg-turbo `decode_jpeg` is the fast path (no PIL image object, no extra copy);
anything it cannot read (PNG, BMP, odd JPEG variants) falls back to PIL. Grey and CMYK images
become RGB; images that are not S x S are resized and counted, because a training set of mixed
sizes usually means the faces were not aligned the way the model expects.

Images may come from strangers: the size an image's header declares is read first (a few bytes of a JPEG's
frame header; Pillow's header read for other formats) and an image declaring more than ``max_pixels`` is
refused before anything is decoded, so a small file cannot make a decoder allocate gigabytes.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from elasticface.utils.errors import BadFile, BadValue

log = logging.getLogger(__name__)

DECODERS = ("torchvision", "pil", "dali")
_JPEG_SOI = b"\xff\xd8"
#: the JPEG markers that start a frame header (SOF0-15 except DHT C4, JPG C8, DAC CC)
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
#: the most pixels an image may declare unless `max_pixels` says otherwise: a 4096 x 4096 photo (16.8 Mpx),
#: over 1,300 aligned 112 x 112 faces and 4x a full-resolution IJB frame; decoding it takes 50 MB
MAX_PIXELS = 4096 * 4096


class CorruptImageError(BadFile, ValueError):
    """The bytes are not an image that any available decoder can read."""


class ImageTooLargeError(CorruptImageError):
    """The image's header declares more pixels than the limit; it was not decoded."""


def check_max_pixels(max_pixels: int | None) -> int:
    """The limit to use: ``max_pixels``, or MAX_PIXELS for None; a ValueError for anything but a positive int."""
    if max_pixels is None:
        return MAX_PIXELS
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
        raise BadValue(f"max_pixels={max_pixels!r}: expected a positive number of pixels, or null for the "
                         f"default {MAX_PIXELS:,}")
    return max_pixels


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a JPEG's first frame header, read without decoding; None when the marker walk does
    not reach one (the caller then lets Pillow read the header)."""
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
        elif 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            i += 2
        elif marker in _JPEG_SOF:
            return ((data[i + 7] << 8) | data[i + 8], (data[i + 5] << 8) | data[i + 6]) if i + 9 <= n else None
        elif marker in (0xD9, 0xDA):  # end of image, or scan data before any frame header
            return None
        else:
            i += 2 + ((data[i + 2] << 8) | data[i + 3])
    return None


def refuse_too_large(width: int, height: int, max_pixels: int) -> None:
    """ImageTooLargeError when width x height exceeds max_pixels."""
    if width * height > max_pixels:
        raise ImageTooLargeError(
            f"declares {width}x{height} = {width * height:,} pixels, more than max_pixels={max_pixels:,}; refused "
            f"before decoding (a decompression bomb, or not a face crop). Raise max_pixels if the image is genuine"
        )


@dataclass
class DecodeStats:
    """Per-process counters; a dataset owns one so workers count independently."""

    decoded: int = 0
    resized: int = 0
    grey: int = 0
    fallback: int = 0


def _check_decoder(decoder: str) -> str:
    if decoder not in DECODERS:
        raise BadValue(f"unknown decoder '{decoder}'; expected one of {DECODERS}")
    # DALI decodes on the GPU inside its own pipeline (elasticface.data.dali); per-item access
    # (labels, debugging, validation) still needs a CPU decoder, so use the fast CPU one.
    return "torchvision" if decoder == "dali" else decoder


def open_header(data: bytes, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """``Image.open`` of the bytes (the header only, nothing decoded) once the size they declare is within
    ``max_pixels``; ImageTooLargeError otherwise (Pillow's own bomb error above 2 x its limit included)."""
    size = jpeg_size(data) if data[:2] == _JPEG_SOI else None
    if size is not None:
        refuse_too_large(*size, max_pixels)
    try:
        img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(f"{exc}; refused before decoding") from None
    try:
        refuse_too_large(*img.size, max_pixels)
    except ImageTooLargeError:
        img.close()
        raise
    return img


def _decode_pil(data: bytes, stats: DecodeStats, max_pixels: int = MAX_PIXELS) -> torch.Tensor:
    try:
        with open_header(data, max_pixels) as img:
            if img.mode in ("L", "LA", "I", "I;16", "1"):
                stats.grey += 1
            # convert() forces the full decode, so truncated files fail here rather than later
            arr = np.array(img.convert("RGB"))
    except ImageTooLargeError:
        raise
    except Exception as exc:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        raise CorruptImageError(f"cannot decode image ({len(data)} bytes): {exc}") from exc
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


def _decode_torchvision(data: bytes, stats: DecodeStats, max_pixels: int = MAX_PIXELS) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_jpeg

    size = jpeg_size(data) if data[:2] == _JPEG_SOI else None
    if size is None:
        stats.fallback += 1
        return _decode_pil(data, stats, max_pixels)
    refuse_too_large(*size, max_pixels)
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
        return _decode_pil(data, stats, max_pixels)
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
    max_pixels: int = MAX_PIXELS,
) -> torch.Tensor:
    """Decode encoded image bytes to a uint8 [3, S, S] RGB tensor; raise CorruptImageError if unreadable, and
    ImageTooLargeError (before decoding) if its header declares more than ``max_pixels``."""
    decoder = _check_decoder(decoder)
    stats = stats if stats is not None else DecodeStats()
    if isinstance(data, np.ndarray):
        data = data.tobytes()
    data = bytes(data)
    if len(data) == 0:
        raise CorruptImageError("empty image payload")
    if decoder == "torchvision":
        img = _decode_torchvision(data, stats, max_pixels)
    else:
        img = _decode_pil(data, stats, max_pixels)
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
        raise BadValue(f"expected a uint8 image, got {arr.dtype}")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
