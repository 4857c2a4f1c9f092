"""Checkpoint writing that never leaves a half-written file where a good one stood.

Lightning writes checkpoints in place; a crash (or a full disk) mid-write destroys `last.ckpt`. Here the
bytes go to a temporary file in the same directory, are flushed to disk, and replace the target with
one atomic rename.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options, got {storage_options!r}")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a checkpoint gets the usual permissions
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
