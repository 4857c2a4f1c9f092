"""Verification pairs stored in files: insightface `.bin` sets and pairs lists (`path1 path2 0|1`, LFW's pairs.txt).

Both become an `EncodedPairSet` (a `PairSet` that keeps images encoded and decodes per item).
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import pickletools
from collections.abc import Sequence

import numpy as np
import torch

from elasticface.data.decode import DecodeStats, array_to_tensor, decode_image, encode_jpeg
from elasticface.data.pairs import PairSet
from elasticface.utils.errors import BadFile, BadValue, MissingPath

_log = logging.getLogger(__name__)

KNOWN_BIN_SETS = ("lfw", "agedb_30", "cfp_fp", "calfw", "cplfw", "cfp_ff", "vgg2_fp")


class EncodedPairSet(PairSet):
    """Pairs kept encoded (JPEG bytes, paths to image files, or raw HWC arrays) and decoded per item.

    A 6,000-pair set is ~30 MB encoded against ~450 MB decoded, and decoding happens in loader workers.
    """

    def __init__(self, name: str, images: Sequence[bytes | str | np.ndarray], issame: np.ndarray | list[bool],
                 image_size: int | None = 112, decoder: str = "torchvision", source: str | None = None) -> None:
        super().__init__(name, issame)
        if len(images) != 2 * self.num_pairs:
            raise BadValue(f"pair set '{name}'{f' ({source})' if source else ''}: {len(images)} images for "
                             f"{self.num_pairs} pairs; expected {2 * self.num_pairs}")
        self.images = list(images)
        self.image_size = image_size
        self.decoder = decoder
        self.source = source
        self.stats = DecodeStats()

    def load_image(self, index: int) -> torch.Tensor:
        item = self.images[index]
        if isinstance(item, np.ndarray) and item.ndim >= 2:
            return array_to_tensor(item, self.image_size, self.stats)
        if isinstance(item, str):
            with open(item, "rb") as f:
                item = f.read()
        try:
            return decode_image(item, self.decoder, self.image_size, self.stats)
        except ValueError as exc:
            # evaluation must not silently drop a pair: a bad image is an error naming the file, set and index
            where = self.images[index] if isinstance(self.images[index], str) else self.source or "memory"
            raise BadFile(f"{where}: pair set '{self.name}': image {index} is unreadable: {exc}") from exc

    def image_key(self, index: int) -> bytes | str:
        """The bytes a `.bin` stores or an array's, without decoding; a file's path (the same path, the same image)."""
        item = self.images[index]
        if isinstance(item, str):
            return os.path.realpath(item)
        return repr(item.shape).encode() + item.tobytes() if isinstance(item, np.ndarray) else bytes(item)

    def raw(self, index: int) -> bytes:
        """The encoded bytes of image `index` (what a `.bin` stores)."""
        item = self.images[index]
        if isinstance(item, str):
            with open(item, "rb") as f:
                return f.read()
        if isinstance(item, np.ndarray):
            return encode_jpeg(item) if item.ndim >= 2 else item.tobytes()
        return bytes(item)


class UnreadableBin(BadFile, pickle.UnpicklingError):
    """A `.bin` that is not a pickle of (images, issame), or one holding objects a `.bin` may not."""


class _CheckedArray(np.ndarray):
    """What a `.bin`'s pickle may build as a numpy array: its state must hold raw bytes of a dtype without Python
    objects (an object array's state is a list, and numpy allocates the array's shape before filling it)."""

    def __new__(cls, *args, **kwargs):
        raise pickle.UnpicklingError("numpy.ndarray called with a shape; a .bin's arrays are built by _reconstruct")

    def __setstate__(self, state):
        parts = state if isinstance(state, tuple) else ()
        dtype = next((p for p in parts if isinstance(p, np.dtype)), None)
        if dtype is None or dtype.hasobject or not isinstance(parts[-1], (bytes, bytearray, str)):
            raise pickle.UnpicklingError("an array state that is not raw bytes of a plain dtype")
        super().__setstate__(state)


class _BinUnpickler(pickle.Unpickler):
    """Unpickler that only builds containers, bytes and numpy arrays: a `.bin` cannot run code, and no size read
    from the file (an array's shape, a bytes length) is allocated beyond the file's own size."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
        ("builtins", "bytearray"),
        ("__builtin__", "bytearray"),
        ("builtins", "bytes"),
    }

    def __init__(self, data: bytes, encoding: str) -> None:
        super().__init__(io.BytesIO(data), encoding=encoding)
        self._limit = len(data)

    def _within(self, shape, dtype) -> None:
        count = 1
        for n in shape if isinstance(shape, tuple) else (shape,):
            count *= int(n) if int(n) > 0 else 0
        if count * np.dtype(dtype).itemsize > self._limit:
            raise pickle.UnpicklingError(f"an array of shape {shape} ({np.dtype(dtype)}), larger than the file")

    def _reconstruct(self, subtype, shape, dtype):
        if subtype is not _CheckedArray:
            raise pickle.UnpicklingError(f"an array of type {subtype!r}")
        self._within(shape, dtype)
        return self._real_reconstruct(_CheckedArray, shape, dtype)

    @staticmethod
    def _bytes(kind):
        def build(*args):
            if args and not isinstance(args[0], (bytes, bytearray, str, list)):
                raise pickle.UnpicklingError(f"{kind.__name__}({type(args[0]).__name__}): a size, not data")
            return kind(*args)
        return build

    @staticmethod
    def _latin1(obj, encoding="utf-8"):
        if str(encoding).lower().replace("-", "") not in ("latin1", "iso88591"):
            raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r}; a .bin's bytes are encoded as latin1")
        return obj.encode("latin1") if isinstance(obj, str) else bytes(obj)

    def find_class(self, module: str, name: str):
        if (module, name) in self._ALLOWED:
            if module.startswith("numpy.core") and hasattr(np, "_core"):
                module = module.replace("numpy.core", "numpy._core", 1)
            found = super().find_class(module, name)
            if name == "_reconstruct":
                self._real_reconstruct = found
                return self._reconstruct
            if name == "ndarray":  # the argument of _reconstruct (called by itself, it would allocate its shape)
                return _CheckedArray
            return {"bytes": self._bytes(bytes), "bytearray": self._bytes(bytearray),
                    "encode": self._latin1}.get(name, found)
        if module.startswith("mxnet"):
            raise pickle.UnpicklingError(
                f"this .bin holds MXNet objects ({module}.{name}); re-export it with "
                "bytes entries (elasticface-convert pairs2bin)"
            )
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a .bin (only bytes and numpy arrays)")


def _as_bytes_entry(item, path: str, index: int) -> bytes | np.ndarray:
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if isinstance(item, str):  # a Python 2 str unpickled with encoding="latin1"
        return item.encode("latin1")
    if isinstance(item, np.ndarray):
        if item.dtype == np.uint8 and item.ndim == 1:
            return item.tobytes()
        if item.dtype == np.uint8 and item.ndim in (2, 3):
            return item  # already decoded pixels (HWC)
    raise BadFile(
        f"{path}: image entry {index} is {type(item).__name__}"
        f"{f' {item.dtype} {item.shape}' if isinstance(item, np.ndarray) else ''}; "
        "expected JPEG bytes or a uint8 array"
    )


def _check_pickle(data: bytes, path: str) -> None:
    """Walk the pickle's opcodes without building anything: each length field must fit in the bytes after it, and
    each memo index must be the next one or one already made. CPython's unpickler allocates a counted string's
    length and grows its memo table up to an index before it reads on, so a corrupt field would otherwise size an
    allocation (4 GB for a flipped bit in a length)."""
    memo = 0
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name == "MEMOIZE":
                memo += 1
            elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                if int(arg) > memo:
                    raise UnreadableBin(f"{path}: memo index {arg} where the pickle has made {memo}; corrupt file")
                memo = max(memo, int(arg) + 1)
            elif op.name == "FRAME" and arg > len(data):
                raise UnreadableBin(f"{path}: a frame of {arg} bytes in a file of {len(data)}; corrupt file")
    except (ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise UnreadableBin(f"{path}: not a readable insightface .bin ({exc}); expected a pickle of "
                            f"(jpeg_images, issame)") from exc


def load_bin(
    path: str, name: str | None = None, image_size: int | None = 112, decoder: str = "torchvision"
) -> EncodedPairSet:
    """Load an insightface verification `.bin` (pickle of (images, issame)); images decode lazily."""
    path = str(path)
    name = name or os.path.splitext(os.path.basename(path))[0]
    if not os.path.isfile(path):
        raise MissingPath(
            f"{path} not found; expected an insightface verification .bin (a pickle of (jpeg_images, issame))"
        )
    with open(path, "rb") as f:
        data = f.read()
    _check_pickle(data, path)
    obj = None
    errors = []
    # encoding="bytes" turns Python 2 str into bytes (JPEGs); latin1 is numpy's advice for old arrays
    for encoding in ("bytes", "latin1"):
        try:
            obj = _BinUnpickler(data, encoding=encoding).load()
            break
        except pickle.UnpicklingError as exc:
            # not a pickle at all ("invalid load key"), or one holding objects a .bin may not (refused)
            raise UnreadableBin(
                f"{path}: not a readable insightface .bin: {exc}; expected a pickle of (jpeg_images, issame)"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - report every attempt below
            errors.append(f"encoding={encoding}: {type(exc).__name__}: {exc}")
    if obj is None:
        raise UnreadableBin(f"{path}: not a readable .bin pickle ({'; '.join(errors)})")
    if not (isinstance(obj, (tuple, list)) and len(obj) == 2):
        raise BadFile(f"{path}: expected a pickle of (images, issame), got {type(obj).__name__}")
    bins, issame = obj
    if not isinstance(bins, (list, tuple)) or not isinstance(issame, (list, tuple, np.ndarray)):
        raise BadFile(f"{path}: expected a pickle of (a list of images, a list of booleans), got "
                      f"({type(bins).__name__}, {type(issame).__name__})")
    images = [_as_bytes_entry(b, path, i) for i, b in enumerate(bins)]
    try:
        issame = np.asarray([bool(v) for v in issame], dtype=bool)
    except (TypeError, ValueError) as exc:
        raise BadFile(f"{path}: the issame list holds something other than booleans ({exc})") from exc
    if len(images) != 2 * len(issame):
        raise BadFile(f"{path}: {len(images)} images for {len(issame)} pairs; expected {2 * len(issame)}")
    return EncodedPairSet(name, images, issame, image_size=image_size, decoder=decoder, source=path)


def write_bin(path: str, images: Sequence[bytes | np.ndarray], issame: Sequence[bool], quality: int = 95) -> None:
    """Write a `.bin` insightface's and our loaders read: JPEG bytes entries, Python bool issame.

    Bytes (and 1-D uint8 arrays of encoded bytes) are stored unchanged, so a file reads back identically;
    HWC RGB uint8 arrays are JPEG-encoded at `quality`.
    """
    issame = [bool(v) for v in issame]
    if len(images) != 2 * len(issame):
        raise BadValue(f"{path}: {len(images)} images for {len(issame)} pairs; expected {2 * len(issame)}")
    entries: list[bytes] = []
    for i, img in enumerate(images):
        if isinstance(img, (bytes, bytearray, memoryview)):
            entries.append(bytes(img))
        elif isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 1:
            entries.append(img.tobytes())
        elif isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.ndim in (2, 3):
            entries.append(encode_jpeg(img, quality))
        else:
            raise BadValue(f"{path}: image {i} is {type(img).__name__}; expected bytes or an HWC uint8 array")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        pickle.dump((entries, issame), f, protocol=4)
    os.replace(tmp, path)


def find_bin_sets(
    root: str, names: Sequence[str] | None = None, image_size: int | None = 112, decoder: str = "torchvision"
) -> dict[str, PairSet]:
    """`{name: PairSet}` for the `.bin` files in `root`: exactly `names` (each must exist), or with
    `names=None` every `.bin` there, as insightface's training uses the verification sets that exist."""
    root = str(root)
    if not os.path.isdir(root):
        raise MissingPath(
            f"verification root {root} is not a directory; expected {root}/<name>.bin "
            f"(e.g. {', '.join(n + '.bin' for n in KNOWN_BIN_SETS[:3])})"
        )
    found = {os.path.splitext(f)[0]: os.path.join(root, f) for f in sorted(os.listdir(root)) if f.endswith(".bin")}
    if names is None:
        if not found:
            raise MissingPath(
                f"no .bin verification sets in {root}: expected {root}/<name>.bin (e.g. "
                f"{', '.join(n + '.bin' for n in KNOWN_BIN_SETS[:3])}); set data.val_root to "
                "their folder, or data.val_sets=null to train without verification"
            )
        wanted = list(found)
        _log.info("verification sets found in %s: %s", root, ", ".join(wanted))
    else:
        wanted = [str(n) for n in names]
        missing = [n for n in wanted if n not in found]
        if missing:
            raise MissingPath(
                f"verification set(s) {missing} not found in {root}: found "
                f"{sorted(found) or 'no .bin files'}; expected {root}/<name>.bin"
            )
    return {n: load_bin(found[n], n, image_size=image_size, decoder=decoder) for n in wanted}


def pairs_from_list(
    pairs_file: str,
    image_root: str,
    name: str | None = None,
    image_size: int | None = 112,
    decoder: str = "torchvision",
    skipped: list[str] | None = None,
) -> EncodedPairSet:
    """A pair set from a text file of `path1 path2 0|1` lines (paths relative to `image_root`) or LFW's own
    `pairs.txt` against an LFW-layout folder (`elasticface.data.pair_lists`). A missing image is an error, or
    with `skipped` given, its pair is left out and the line naming it appended there."""
    from elasticface.data.pair_lists import read_pair_list

    pairs_file, image_root = str(pairs_file), str(image_root)
    name = name or os.path.splitext(os.path.basename(pairs_file))[0]
    paths, issame = read_pair_list(pairs_file, image_root, skipped)
    return EncodedPairSet(name, paths, issame, image_size=image_size, decoder=decoder, source=pairs_file)
