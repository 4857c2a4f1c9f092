"""Low-resolution faces from sharp ones: each aligned face shrunk to s x s pixels and blown back to its size.

Surveillance cameras and TinyFace (Cheng et al., 2018) give faces of 16-32 pixels, and a model trained on
MS1M's sharp faces loses much of its accuracy on them (AdaFace, Kim et al. 2022, trains with such a degradation).
`elasticface-convert lowres SRC OUT --size 16-32` writes SRC's layout again with every face degraded, so any
benchmark the project builds from aligned photos (elasticface-cfp-split, elasticface-lfw-split, pairs2bin) has a
low-resolution twin with the same people and pairs.

The size of each face is drawn from [lo, hi] by a hash of its path inside SRC and the seed: the same file gets
the same size on every machine and in every run, whatever order the folder is read in. Pillow's area-weighted
(antialiased) bicubic shrinks it, bicubic blows it back; integer arithmetic, the same bytes everywhere.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
from pathlib import Path

import numpy as np
from PIL import Image

from elasticface.data.decode import MAX_PIXELS, CorruptImageError, decode_image, encode_jpeg
from elasticface.data.folder import list_images
from elasticface.utils.output_paths import atomic_path, atomic_write, inside, refuse_existing
from elasticface.utils.errors import BadValue, MissingPath

log = logging.getLogger(__name__)


def parse_sizes(text: str) -> tuple[int, int]:
    """`16-32` -> (16, 32), `24` -> (24, 24); each between 4 and 112."""
    parts = text.split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or hi is None or not 4 <= lo <= hi <= 112:
        raise BadValue(f"--size {text!r}: expected a size or a range of sizes in pixels, 4 <= lo <= hi <= 112 "
                         "(e.g. 16-32)")
    return lo, hi


def drawn_size(relative_path: str, sizes: tuple[int, int], seed: int = 0) -> int:
    """The size in [lo, hi] this file is shrunk to: a hash of its path and the seed, not a random state."""
    lo, hi = sizes
    digest = hashlib.sha256(f"{seed}:{relative_path}".encode()).digest()
    return lo + int.from_bytes(digest[:8], "little") % (hi - lo + 1)


def degrade(image: np.ndarray, size: int) -> np.ndarray:
    """HWC uint8 RGB -> the same shape, through size x size pixels."""
    height, width = image.shape[:2]
    small = Image.fromarray(image).resize((size, size), Image.Resampling.BICUBIC, reducing_gap=None)
    return np.asarray(small.resize((width, height), Image.Resampling.BICUBIC))


def degrade_folder(src: str | Path, out: str | Path, sizes: tuple[int, int] = (16, 32), seed: int = 0,
                   quality: int = 95, max_pixels: int = MAX_PIXELS, overwrite: bool = False) -> dict[str, int]:
    """Every image under `src` degraded into the same path under `out` (JPEG, or PNG for a .png), and
    `out/lowres.csv` with each file's size. An unreadable image is skipped, named and counted. An `out` that
    holds entries is refused unless `overwrite`; each file is written whole or not at all."""
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise MissingPath(f"{src}: not a folder; expected aligned faces (elasticface-align's output)")
    if out.resolve() == src.resolve():
        raise BadValue(f"{out}: the output folder is the input folder; give another")
    files = list_images(str(src))
    if not files:
        raise MissingPath(f"{src}: no .jpg/.png images found")
    refuse_existing(out, overwrite)
    written = skipped = 0
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "lowres.csv") as manifest_tmp, open(manifest_tmp, "w", newline="") as manifest:
        rows = csv.writer(manifest)
        rows.writerow(["path", "size"])
        for relative in files:  # paths relative to src, in a sorted order
            path = src / relative
            try:
                image = decode_image(path.read_bytes(), "pil", image_size=None, max_pixels=max_pixels)
            except CorruptImageError as exc:
                log.warning("%s: skipped, unreadable (%s)", path, exc)
                skipped += 1
                continue
            size = drawn_size(relative, sizes, seed)
            target = inside(out, relative, str(src))
            target.parent.mkdir(parents=True, exist_ok=True)
            low = degrade(image.permute(1, 2, 0).numpy(), size)
            if target.suffix.lower() == ".png":  # the same name, so pair lists naming it still find it
                buffer = io.BytesIO()
                Image.fromarray(low).save(buffer, format="PNG")
                atomic_write(target, buffer.getvalue(), fsync=False)
            else:
                atomic_write(target, encode_jpeg(low, quality), fsync=False)
            rows.writerow([Path(relative).as_posix(), size])
            written += 1
    return {"images": written, "skipped": skipped, "sizes": f"{sizes[0]}-{sizes[1]}"}
