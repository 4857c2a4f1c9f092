"""Hand-made insightface RecordIO files: framed records, IfQQ headers, .rec/.idx/property writers."""

from __future__ import annotations

import os
import struct

MAGIC = 0xCED7230A
MAGIC_B = struct.pack("<I", MAGIC)


def whole(payload: bytes) -> bytes:
    """One record, cflag 0, by hand."""
    return struct.pack("<II", MAGIC, len(payload)) + payload + b"\0" * ((-len(payload)) % 4)


def ifqq(flag: int, label: float, id_: int, id2: int = 0, labels: list[float] | None = None) -> bytes:
    return struct.pack("<IfQQ", flag, label, id_, id2) + (struct.pack(f"<{len(labels)}f", *labels) if labels else b"")


def write_files(root, records: list[tuple[int, bytes]], prop: str | None = None) -> None:
    """records: (key, framed bytes) in file order -> train.rec + train.idx (+ property)."""
    os.makedirs(root, exist_ok=True)
    offset = 0
    with open(os.path.join(root, "train.rec"), "wb") as rec, open(os.path.join(root, "train.idx"), "w") as idx:
        for key, framed in records:
            rec.write(framed)
            idx.write(f"{key}\t{offset}\n")
            offset += len(framed)
    if prop is not None:
        with open(os.path.join(root, "property"), "w") as f:
            f.write(prop)
