"""Photos from disk for detection: JPEG/PNG of any size, colour or grey, EXIF orientation applied, the pixel
count checked from the header before any decoding (a photo may come from a stranger)."""

from __future__ import annotations

import warnings

import numpy as np
from PIL import Image, ImageOps

from elasticface.utils.errors import BadFile

PHOTO_EXTENSIONS = (".jpg", ".jpeg", ".png")
DEFAULT_MAX_PIXELS = 80_000_000  # a 10,000 x 8,000 photo; larger is refused unless --max-pixels says otherwise


class BadPhotoError(BadFile, ValueError):
    """A file that is not a photo this command can read: the message names the file and why."""


def read_photo(path: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """uint8 RGB [H, W, 3] of the photo as a person sees it (EXIF orientation applied; grey repeated to RGB)."""
    try:
        with Image.open(path) as im:
            width, height = im.size
            if width * height > max_pixels:
                raise BadPhotoError(f"{path}: {width}x{height} = {width * height:,} pixels is over the limit of "
                                    f"{max_pixels:,} (raise it with --max-pixels if the photo is trusted)")
            with warnings.catch_warnings():  # the limit is ours (checked above), not PIL's default warning
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                im.load()  # the full decode: a truncated file fails here, naming itself below
            upright = ImageOps.exif_transpose(im)
            return np.asarray(upright.convert("RGB"))
    except BadPhotoError:
        raise
    except FileNotFoundError:
        raise BadPhotoError(f"{path}: not found") from None
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBomb*, ...
        raise BadPhotoError(f"{path}: not a readable JPEG/PNG photo ({type(exc).__name__}: {exc})") from exc
