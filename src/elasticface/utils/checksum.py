"""SHA-256 of a file, read in blocks: how released weights are reported and shipped detector weights checked."""

from __future__ import annotations

import hashlib


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
