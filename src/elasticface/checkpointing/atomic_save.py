"""Checkpoint writes that a `kill -9` or a full disk cannot turn into a broken `last.ckpt`.

A write that finds the disk full (ENOSPC, or EDQUOT: over quota) removes its temporary file, leaves the previous
checkpoint as it was, and raises `DiskFull`, a user's error: one line naming the file and "no space left".
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from elasticface.untrusted import read_checkpoint
from elasticface.utils.errors import UserError
from elasticface.utils.lightning_private import is_local_path

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
#: the errors of a write that did not fit: no space left on the device, the disk quota exceeded
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(UserError, OSError):
    """A checkpoint that did not fit on its disk: the previous one is unchanged, the partial write removed."""

    def __init__(self, path: str | os.PathLike, cause: OSError) -> None:
        target = Path(path)
        where = "under the disk quota" if cause.errno == errno.EDQUOT else "on the device"
        kept = f"the previous {target.name} kept whole" if target.exists() else "the checkpoints before it unchanged"
        message = (f"{target}: no space left {where} to write this checkpoint (the partial write is removed, {kept}); "
                   f"free space in {target.parent} or give the run a bigger disk (hydra.run.dir=...), then resume it "
                   f"with resume=auto")
        super().__init__(cause.errno, message, str(target))

    def __str__(self) -> str:
        return str(self.strerror)


def disk_full_cause(exc: BaseException | None) -> OSError | None:
    """The OSError ENOSPC / EDQUOT behind `exc` (itself, or along its causes: torch.save reports a failed write as
    a RuntimeError whose context is the OSError), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def temporary_prefix(target: Path) -> str:
    return f".{target.name}."


def remove_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Delete what killed checkpoint writes left in `directory` (local only); returns the deleted files."""
    if not is_local_path(str(directory)) or not os.path.isdir(directory):
        return []
    removed = []
    for path in Path(directory).iterdir():
        if path.name.startswith(".") and ".ckpt." in path.name and path.name.endswith(TEMP_SUFFIX) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        log.warning("removed %d unfinished checkpoint write(s) left by a killed run: %s",
                    len(removed), ", ".join(p.name for p in removed))
    return removed


# Why not Lightning's own save (lightning_fabric 2.6 `_atomic_save`, read in the installed source): for a
# local path it writes an fsspec transaction file made by `tempfile.mkstemp()` in the system temp
# directory and `shutil.move`s it over the target, with no fsync. When /tmp is another file system than
# the checkpoint directory (node-local /tmp, shared /scratch: the usual cluster) that move is a copy into
# the target itself, so a kill mid-copy leaves a truncated `last.ckpt`, and the killed write's temporary
# stays in /tmp where no run looks for it. Remote paths (`s3://`, `gs://`, ...) keep Lightning's save.
#
# Reading: every checkpoint the Trainer restores (ckpt_path=, resume=auto, the `hpc` checkpoint of a requeued
# job) comes through `load_checkpoint`, and is read as data whatever Lightning asks: Lightning 2.6 passes
# weights_only=None, which torch.load takes as True for a local file but `cloud_io._load` turns into False
# for an http(s) URL. A local file only, weights_only=True always.
class AtomicCheckpointIO(TorchCheckpointIO):
    def load_checkpoint(self, path: str | os.PathLike, map_location: Any = lambda storage, loc: storage,
                        weights_only: bool | None = None) -> dict[str, Any]:
        return read_checkpoint(path, map_location)

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any | None = None
    ) -> None:
        if not is_local_path(str(path)):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options for a local path, got {storage_options!r}")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # beside the target (same file system), fsynced, then renamed over it in one step; a killed write
        # leaves only this `.<name>.*.tmp`, which `remove_stale_temporaries` deletes when the next run starts
        fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent)
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a checkpoint gets the usual permissions
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException as exc:
            Path(tmp).unlink(missing_ok=True)
            full = disk_full_cause(exc) if isinstance(exc, Exception) else None
            if full is not None and not isinstance(exc, DiskFull):
                raise DiskFull(target, full) from exc
            raise
