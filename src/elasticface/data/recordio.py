"""insightface / MXNet RecordIO in pure Python: the file format (reader, writer, index, IfQQ header).

The training Dataset built on it is `elasticface.data.recordio_dataset.RecordIODataset`.

Format (dmlc RecordIO, as written by MXNet's `MXIndexedRecordIO` and insightface's builders):

* `.rec`: records, each `uint32 magic 0xCED7230A`, `uint32 lrec` (top 3 bits: continuation flag,
  low 29 bits: length), the chunk bytes, zero padding to a multiple of 4. A payload that contains the
  magic at a 4-aligned offset is split there into chunks (flag 1 first, 2 middle, 3 last; 0 for a
  whole record) and the magic is dropped; the reader puts it back between chunks.
* payload: 24-byte header `IfQQ` = (flag, label float32, id uint64, id2 uint64), then `flag` float32
  labels when flag > 0 (the header's own label is then unused), then the encoded image.
* `.idx`: text, `key<TAB>offset` per line. `property`: `num_classes,H,W`.
* legacy insightface layout (faces_emore, faces_webface_112x112, ...): key 0 is a header record with
  flag 2 and labels [N+1, N+1+C] and no image; images are keys 1..N; keys N+1..N+C hold each
  identity's [start, end) range of image keys. im2rec layouts have no header: every key is an image.
"""

from __future__ import annotations

import io
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
from elasticface.utils.errors import BadFile, BadValue, MissingPath

log = logging.getLogger(__name__)

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_LEN_MASK = (1 << 29) - 1
_U32X2 = struct.Struct("<II")
_IR = struct.Struct("<IfQQ")
HEADER_SIZE = _IR.size  # 24
LAYOUT = "expected {root}/train.rec, train.idx and property as written by insightface (or elasticface-convert)"


class CorruptRecordError(BadFile, ValueError):
    """A record cannot be read: wrong magic, truncated file, bad chunk sequence, bad header. The per-record reader
    names the byte offset (the dataset that skips and counts the record names the file)."""


class IRHeader(NamedTuple):
    flag: int
    label: float | np.ndarray  # scalar, or float32 vector when flag > 0
    id: int
    id2: int


# --------------------------------------------------------------------------------------------------
# payload header


def pack_header(label: float | Sequence[float] | np.ndarray, id: int = 0, id2: int = 0) -> bytes:
    """IfQQ header (+ vector labels): a scalar label gives flag 0, a vector of n labels flag n."""
    if np.ndim(label) == 0:
        return _IR.pack(0, float(label), id, id2)
    vec = np.asarray(label, dtype="<f4").ravel()
    return _IR.pack(vec.size, 0.0, id, id2) + vec.tobytes()


def unpack_header(payload: bytes) -> tuple[IRHeader, bytes]:
    """Split a payload into its header and the image bytes."""
    if len(payload) < HEADER_SIZE:
        raise CorruptRecordError(f"payload of {len(payload)} bytes is shorter than the {HEADER_SIZE}-byte IfQQ header")
    flag, label, id_, id2 = _IR.unpack_from(payload, 0)
    start = HEADER_SIZE
    if flag > 0:
        end = start + 4 * flag
        if end > len(payload):
            raise CorruptRecordError(f"header announces {flag} labels but the payload has only {len(payload)} bytes")
        label = np.frombuffer(payload, dtype="<f4", count=flag, offset=start).astype(np.float32)
        start = end
    return IRHeader(flag, label, id_, id2), payload[start:]


def label_to_int(label: float | np.ndarray) -> int:
    """Class index from a float32 label (first entry of a vector label); rounded, never truncated."""
    value = float(label[0]) if np.ndim(label) > 0 else float(label)
    if not np.isfinite(value) or abs(value) >= 1 << 31:
        raise CorruptRecordError(f"label {value} is not a class index (finite, below 2^31)")
    return int(round(value))


# --------------------------------------------------------------------------------------------------
# framing


def _reader(f):
    """A `pread(n, offset)` function for a file object or raw fd: positional reads, no shared seek state."""
    if isinstance(f, int):
        return lambda n, off: os.pread(f, n, off)
    try:
        fd = f.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        def read(n: int, off: int) -> bytes:
            f.seek(off)
            return f.read(n)
        return read
    return lambda n, off: os.pread(fd, n, off)


def _file_size(f) -> int:
    """The size of a raw fd or a binary file object."""
    if isinstance(f, int):
        return os.fstat(f).st_size
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        here = f.tell()
        size = f.seek(0, io.SEEK_END)
        f.seek(here)
        return size


def read_record(f, offset: int, file_size: int | None = None) -> bytes:
    """Read the (possibly multi-chunk) record starting at `offset` from a binary file object or fd. A chunk length
    is checked against the file's size before anything is read: a corrupt length field never sizes a buffer."""
    file_size = _file_size(f) if file_size is None else file_size
    if offset < 0 or offset + 8 > file_size:
        raise CorruptRecordError(f"offset {offset} is past the end of the file ({file_size} bytes)")
    pread = _reader(f)
    parts: list[bytes] = []
    pos = offset
    while True:
        head = pread(8, pos)
        if len(head) < 8:
            raise CorruptRecordError(f"truncated record header at byte {pos}")
        magic, lrec = _U32X2.unpack(head)
        if magic != MAGIC:
            raise CorruptRecordError(f"wrong magic 0x{magic:08X} at byte {pos} (expected 0x{MAGIC:08X})")
        cflag, length = lrec >> 29, lrec & _LEN_MASK
        if cflag > 3:
            raise CorruptRecordError(f"invalid continuation flag {cflag} at byte {pos}")
        if (cflag in (0, 1)) != (not parts):
            raise CorruptRecordError(f"chunk flag {cflag} out of sequence at byte {pos}")
        if pos + 8 + length > file_size:
            raise CorruptRecordError(f"truncated record at byte {pos}: its header says {length} bytes, the file "
                                     f"ends {file_size - pos - 8} bytes after it")
        data = pread(length, pos + 8) if length else b""
        if len(data) < length:
            raise CorruptRecordError(f"truncated record at byte {pos}: {len(data)} of {length} bytes present")
        if cflag == 0:
            return data
        if parts:
            parts.append(_MAGIC_BYTES)
        parts.append(data)
        pos += 8 + length + (-length) % 4
        if cflag == 3:
            return b"".join(parts)


def read_record_header(f, offset: int, file_size: int | None = None) -> IRHeader:
    """Only the IfQQ header (+ vector labels) of the record at `offset`: a few bytes, not the image."""
    if offset < 0 or (file_size is not None and offset + 8 + HEADER_SIZE > file_size):
        raise CorruptRecordError(f"offset {offset} is past the end of the file ({file_size} bytes)")
    pread = _reader(f)
    head = pread(8 + HEADER_SIZE, offset)
    if len(head) < 8 + HEADER_SIZE:
        raise CorruptRecordError(f"truncated record at byte {offset}")
    magic, lrec = _U32X2.unpack_from(head)
    if magic != MAGIC:
        raise CorruptRecordError(f"wrong magic 0x{magic:08X} at byte {offset} (expected 0x{MAGIC:08X})")
    cflag, length = lrec >> 29, lrec & _LEN_MASK
    flag = _IR.unpack_from(head, 8)[0]
    need = HEADER_SIZE + (4 * flag if 0 < flag < 1 << 16 else 0)
    if cflag not in (0, 1) or length < need:
        # rare: the magic occurs inside the header itself, or a corrupt record; take the slow path
        return unpack_header(read_record(f, offset, file_size))[0]
    extra = pread(need - HEADER_SIZE, offset + 8 + HEADER_SIZE) if need > HEADER_SIZE else b""
    return unpack_header(head[8:] + extra)[0]


def encode_record(payload: bytes) -> bytes:
    """dmlc framing for one payload: split at every 4-aligned magic, pad the end to 4 bytes."""
    n = len(payload)
    if n >= 1 << 29:
        raise BadValue(f"record of {n} bytes exceeds the RecordIO limit of 2^29 - 1")
    out: list[bytes] = []
    start = 0
    # find() is C-speed; only 4-aligned hits split the record (unaligned ones are ordinary data)
    hit = payload.find(_MAGIC_BYTES)
    while hit != -1:
        if hit % 4 == 0 and hit + 4 <= n:
            cflag = 1 if start == 0 else 2
            out.append(struct.pack("<II", MAGIC, (cflag << 29) | (hit - start)))
            out.append(payload[start:hit])
            start = hit + 4
            hit = payload.find(_MAGIC_BYTES, start)
        else:
            hit = payload.find(_MAGIC_BYTES, hit + 1)
    cflag = 0 if start == 0 else 3
    out.append(struct.pack("<II", MAGIC, (cflag << 29) | (n - start)))
    out.append(payload[start:])
    out.append(b"\0" * ((-(n - start)) % 4))
    return b"".join(out)


class RecordIOWriter:
    """Append-only `.rec` + `.idx` writer (MXIndexedRecordIO-compatible files)."""

    def __init__(self, rec_path: str, idx_path: str | None = None) -> None:
        self.rec_path = str(rec_path)
        self.idx_path = str(idx_path) if idx_path is not None else os.path.splitext(self.rec_path)[0] + ".idx"
        self._rec = open(self.rec_path, "wb")
        self._idx = open(self.idx_path, "w")
        self._offset = 0
        self.num_split_records = 0

    def write(self, key: int, payload: bytes) -> int:
        framed = encode_record(payload)
        if len(framed) != len(payload) + 8 + (-len(payload)) % 4:
            self.num_split_records += 1
        offset = self._offset
        self._rec.write(framed)
        self._idx.write(f"{key}\t{offset}\n")
        self._offset += len(framed)
        return offset

    def write_image(self, key: int, label: float | Sequence[float], image: bytes, id2: int = 0) -> int:
        return self.write(key, pack_header(label, key, id2) + bytes(image))

    def close(self) -> None:
        self._rec.close()
        self._idx.close()

    def __enter__(self) -> RecordIOWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_index(idx_path: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse a `.idx` file into (keys, offsets) int64 arrays, in file order."""
    keys: list[int] = []
    offsets: list[int] = []
    try:
        with open(idx_path, encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) != 2:
                    raise BadFile(f"{idx_path}:{lineno}: expected 'key<TAB>offset', got {line[:80]!r}")
                try:
                    key, offset = int(parts[0]), int(parts[1])
                except ValueError:
                    raise BadFile(f"{idx_path}:{lineno}: expected integer key and offset, got {line[:80]!r}") from None
                if not (-(1 << 63) <= key < 1 << 63 and 0 <= offset < 1 << 63):
                    raise BadFile(f"{idx_path}:{lineno}: key {key} or byte offset {offset} out of range; expected a "
                                  f"key and an offset >= 0 of at most 63 bits")
                keys.append(key)
                offsets.append(offset)
    except UnicodeDecodeError as err:
        raise BadFile(f"{idx_path}: not ASCII text ({err}); expected 'key<TAB>offset' lines") from err
    return np.asarray(keys, dtype=np.int64), np.asarray(offsets, dtype=np.int64)


def scan_records(rec_path: str) -> Iterator[tuple[int, int]]:
    """Walk a `.rec` from the start, yielding (ordinal, offset) per record: rebuilds a lost `.idx`."""
    size = os.path.getsize(rec_path)
    with open(rec_path, "rb") as f:
        offset, ordinal = 0, 0
        while offset + 8 <= size:
            start = offset
            while True:
                f.seek(offset)
                head = f.read(8)
                if len(head) < 8:
                    log.warning("%s: last record at byte %d is truncated; not indexed", rec_path, start)
                    return
                magic, lrec = _U32X2.unpack(head)
                if magic != MAGIC:
                    raise CorruptRecordError(
                        f"{rec_path}: wrong magic at byte {offset}; cannot rebuild the index past it"
                    )
                cflag, length = lrec >> 29, lrec & _LEN_MASK
                offset += 8 + length + (-length) % 4
                if cflag in (0, 3):
                    break
            if offset > size:
                log.warning("%s: last record at byte %d is truncated; not indexed", rec_path, start)
                return
            yield ordinal, start
            ordinal += 1


class IndexedRecordFile:
    """Random access to records by key; the file handle opens lazily per process and is not pickled."""

    def __init__(self, rec_path: str, idx_path: str) -> None:
        for path in (rec_path, idx_path):
            if not os.path.isfile(path):
                root = os.path.dirname(path) or "."
                hint = ""
                if path == idx_path and os.path.isfile(rec_path):
                    hint = f" (a lost index can be rebuilt: elasticface-convert reindex {root})"
                raise MissingPath(f"{path} not found; " + LAYOUT.format(root=root) + hint)
        self.rec_path, self.idx_path = str(rec_path), str(idx_path)
        keys, offsets = read_index(idx_path)
        self.keys = keys
        # numpy, not a dict: a dict of 5.8M int pairs costs ~0.5 GB in every DataLoader worker
        order = np.argsort(keys, kind="stable")
        self._sorted_keys = keys[order]
        self._sorted_offsets = offsets[order]
        k0 = int(self._sorted_keys[0]) if keys.size else 0
        self._dense_from = k0 if np.array_equal(self._sorted_keys, np.arange(k0, k0 + keys.size)) else None
        self.file_size = os.path.getsize(rec_path)
        self._fh = None
        self._pid: int | None = None

    def _file(self) -> int:
        # a handle inherited through fork is shared with the parent: each process opens its own
        if self._fh is None or self._pid != os.getpid():
            self._fh = open(self.rec_path, "rb", buffering=0)
            self._pid = os.getpid()
        return self._fh.fileno()

    def offset_of(self, key: int) -> int | None:
        """Byte offset of `key`, or None when the index lacks it."""
        n = self._sorted_keys.size
        if self._dense_from is not None:
            i = key - self._dense_from
            return int(self._sorted_offsets[i]) if 0 <= i < n else None
        i = int(np.searchsorted(self._sorted_keys, key))
        return int(self._sorted_offsets[i]) if i < n and self._sorted_keys[i] == key else None

    def __contains__(self, key: int) -> bool:
        return self.offset_of(key) is not None

    def _offset(self, key: int) -> int:
        offset = self.offset_of(key)
        if offset is None:
            raise KeyError(f"key {key} is not in {self.idx_path}")
        return offset

    def read(self, key: int) -> bytes:
        return read_record(self._file(), self._offset(key), self.file_size)

    def read_header(self, key: int) -> IRHeader:
        return read_record_header(self._file(), self._offset(key), self.file_size)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_fh"] = None
        state["_pid"] = None
        return state
