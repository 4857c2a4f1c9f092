"""MXNet's NDArray list format (``model-0000.params``) read with numpy alone: no MXNet, no pickle.

The layout is MXNet's ``NDArray::Save`` (src/ndarray/ndarray.cc), all little-endian:

- the list: ``uint64 0x112`` (magic), ``uint64`` reserved, ``uint64 n``, n arrays, ``uint64 k`` (0 or n),
  k names, each ``uint64 length`` + UTF-8 bytes. ``mx.model.save_checkpoint`` names them ``arg:<name>``
  (learned parameters) and ``aux:<name>`` (BatchNorm running statistics).
- an array: ``uint32`` magic ``0xF993FAC9`` (v2) or ``0xF993FACA`` (v3, numpy shape semantics), ``int32``
  storage type (0 dense; sparse types carry extra blocks and are refused), the shape (``int32 ndim`` +
  ndim ``int64``), the context (``int32`` device type, ``int32`` device id), ``int32`` dtype flag, then the
  raw data. Older files: magic ``0xF993FAC8`` (v1: no storage type) or no magic at all, where the first
  ``uint32`` is ndim followed by ``uint32`` dimensions. ndim 0 is an empty (none) array: nothing follows; under
  v3's numpy semantics ndim 0 is a scalar and ndim -1 the none array.
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np

from elasticface.utils.errors import BadFile

__all__ = ["LIST_MAGIC", "MXNetParamsError", "is_mxnet_params", "read_mxnet_params"]

LIST_MAGIC = 0x112
_V1, _V2, _V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
#: mshadow's type flags (include/mshadow/base.h)
_DTYPES = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8, 6: np.int64,
           7: np.bool_}
_STORAGE = {0: "dense", 1: "row_sparse", 2: "csr"}
#: a released face model has a few hundred arrays; a count beyond this is a foreign file read as a header
_MAX_ARRAYS = 1_000_000
_MAX_NDIM = 32


class MXNetParamsError(BadFile, ValueError):
    """A ``.params`` file that is not a readable MXNet NDArray list; the message names the file and the offset."""


class _Reader:
    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MXNetParamsError(
                f"{self.path}: truncated: {what} needs {n} bytes at offset {self.pos}, but the file ends at "
                f"{len(self.data)} bytes")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def is_mxnet_params(path: str) -> bool:
    """Whether ``path`` starts with the NDArray list header (magic 0x112, reserved 0)."""
    with open(path, "rb") as f:
        head = f.read(16)
    return len(head) == 16 and struct.unpack("<QQ", head) == (LIST_MAGIC, 0)


def _shape(reader: _Reader, what: str, legacy_ndim: int | None = None,
           np_shape: bool = False) -> tuple[int, ...] | None:
    """The shape, or None for MXNet's empty "none" array (ndim 0; under v3's numpy semantics ndim -1, and ndim 0
    is a scalar)."""
    if legacy_ndim is not None:  # pre-v1 files: the magic was the ndim, dimensions are uint32
        ndim, fmt = legacy_ndim, "I"
    else:
        (ndim,) = reader.unpack("i", f"{what}: ndim")
        fmt = "q"
    if np_shape and ndim == -1:
        return None
    if not 0 <= ndim <= _MAX_NDIM:
        raise MXNetParamsError(f"{reader.path}: {what} has {ndim} dimensions at offset {reader.pos}; "
                               f"not an MXNet NDArray (corrupt or foreign file)")
    if ndim == 0 and not np_shape:
        return None
    dims = reader.unpack(f"{ndim}{fmt}", f"{what}: shape") if ndim else ()
    if any(d < 0 for d in dims):
        if np_shape:
            return None
        raise MXNetParamsError(f"{reader.path}: {what} has an unknown dimension in shape {dims}")
    if any(d > len(reader.data) for d in dims):  # no array of the file has more elements than it has bytes
        raise MXNetParamsError(f"{reader.path}: {what} has shape {dims}, a dimension larger than the file "
                               f"({len(reader.data)} bytes); corrupt file")
    return tuple(int(d) for d in dims)


def _array(reader: _Reader, index: int) -> np.ndarray | None:
    what = f"array {index}"
    start = reader.pos
    (magic,) = reader.unpack("I", f"{what}: magic")
    legacy_ndim = None
    if magic in (_V2, _V3):
        (stype,) = reader.unpack("i", f"{what}: storage type")
        if stype != 0:
            raise MXNetParamsError(f"{reader.path}: {what} (offset {start}) is stored as "
                                   f"{_STORAGE.get(stype, f'storage type {stype}')}; only dense arrays are read")
    elif magic != _V1:
        legacy_ndim = magic
    shape = _shape(reader, what, legacy_ndim, np_shape=magic == _V3)
    if shape is None:
        return None
    reader.unpack("ii", f"{what}: context")
    (flag,) = reader.unpack("i", f"{what}: dtype")
    if flag not in _DTYPES:
        raise MXNetParamsError(f"{reader.path}: {what} (offset {start}) has dtype flag {flag}; expected one of "
                               f"{sorted(_DTYPES)} (float32 is 0)")
    dtype = np.dtype(_DTYPES[flag]).newbyteorder("<")
    count = math.prod(shape)  # exact: numpy's int64 product wraps around for a corrupt shape
    raw = reader.take(count * dtype.itemsize, f"{what}: data of shape {shape} ({dtype.name})")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def read_mxnet_params(path: str) -> dict[str, np.ndarray]:
    """``{name: array}`` of an MXNet ``.params`` file, names as saved (``arg:conv0_weight``, ``aux:bn0_moving_var``).

    Raises :class:`MXNetParamsError` naming the file for a foreign header, a truncated file, a sparse
    array, an unknown dtype, unnamed arrays or trailing bytes.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"MXNet parameter file {path} not found")
    with open(path, "rb") as f:
        reader = _Reader(f.read(), path)
    if len(reader.data) < 16 or struct.unpack("<QQ", reader.data[:16]) != (LIST_MAGIC, 0):
        raise MXNetParamsError(f"{path}: not an MXNet NDArray file (expected the header 0x112, 0 in its first 16 "
                               f"bytes, found {reader.data[:16].hex() or 'an empty file'})")
    reader.pos = 16
    (count,) = reader.unpack("Q", "the array count")
    if count > _MAX_ARRAYS:
        raise MXNetParamsError(f"{path}: claims {count} arrays; corrupt file")
    arrays = [_array(reader, i) for i in range(count)]
    (n_names,) = reader.unpack("Q", "the name count")
    if n_names != count:
        raise MXNetParamsError(f"{path}: {count} arrays but {n_names} names; a checkpoint names every array")
    names = []
    for i in range(n_names):
        (length,) = reader.unpack("Q", f"name {i}: length")
        raw = reader.take(length, f"name {i}")
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise MXNetParamsError(f"{path}: name {i} is not UTF-8 text ({raw[:40]!r}); corrupt file") from err
    if reader.pos != len(reader.data):
        raise MXNetParamsError(f"{path}: {len(reader.data) - reader.pos} bytes after the last name; corrupt file")
    if len(set(names)) != len(names):
        raise MXNetParamsError(f"{path}: a name appears twice; corrupt file")
    return {name: array for name, array in zip(names, arrays) if array is not None}
