"""Test images made from a seed: smooth random faces (a random 8x8 colour grid, upsampled), as pixels, as
encoded bytes, or as files. Smooth, so a JPEG round trip keeps every pixel within a few levels."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def smooth_image(seed: int, size: int | tuple[int, int] = 112, grey: bool = False) -> np.ndarray:
    """uint8 pixels, [H, W, 3] (or [H, W] when grey); `size` is S for S x S or (H, W)."""
    height, width = (size, size) if isinstance(size, int) else size
    small = np.random.default_rng(seed).integers(0, 256, (8, 8) if grey else (8, 8, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(small).resize((width, height), Image.BILINEAR))


def encode(pixels: np.ndarray, fmt: str = "JPEG", quality: int = 95) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return buf.getvalue()


def smooth_jpeg(seed: int, size: int | tuple[int, int] = 112, grey: bool = False, quality: int = 95) -> bytes:
    return encode(smooth_image(seed, size, grey), "JPEG", quality)


def save_image(path: str | Path, pixels: np.ndarray, fmt: str = "JPEG") -> None:
    """Write `pixels` as an image file (JPEG at quality 95 unless `fmt` says otherwise), making its folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(encode(pixels, fmt))


def rgb_of(data: bytes) -> np.ndarray:
    """[H, W, 3] uint8 pixels of encoded image bytes, as Pillow decodes them."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height, with one compressed row of pixels (the rest missing): a
    decompression bomb's header at a few hundred bytes."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * (3 * width + 1)))
            + chunk(b"IEND", b""))
