"""Where the commands write: inside the output folder the user named, never over what is there unasked, whole or
not at all (docs/security.md, "Nothing written where it was not asked").

- `inside(root, relative)`: the path a writer builds from a name it read (a list entry, a person's name in a
  pairs file) joined to its output folder, refused (`BadFile`) unless its real path (links followed, `..`
  resolved) stays inside the folder's real path.
- `refuse_existing(path, overwrite)`: an output folder that already holds entries, or an output file that
  exists, is refused (`OutputExists`, one line naming it) unless the command was told to overwrite.
- `atomic_path(target)` / `atomic_write(target, data)`: the output is written to a temporary name beside it (the
  same file system) and renamed over `target` in one step, so a crash leaves the old file or the new one, never
  half of one, and no temporary behind. Checkpoints have their own (checkpointing/atomic_save.py).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from elasticface.utils.errors import BadFile, OutputExists

#: the temporary files `atomic_path` writes: `.<name>.<random>.part` beside the target
TEMP_SUFFIX = ".part"


def _within(real_root: str, real_path: str) -> bool:
    return real_path != real_root and os.path.commonpath([real_root, real_path]) == real_root


def inside(root: str | os.PathLike, relative: str | os.PathLike, source: str | None = None) -> Path:
    """`root / relative`, after checking that its real path lies inside `root`'s real path: a name that climbs
    out (`..`), an absolute one, or one that leads out through a link is refused with `BadFile` naming the
    entry (and `source`, the file or list it was read from)."""
    path = Path(root) / relative
    real_root = os.path.realpath(root)
    if not _within(real_root, os.path.realpath(path)):
        where = f"{source}: " if source else ""
        raise BadFile(f"{where}the entry {str(relative)!r} would be written at {os.path.realpath(path)}, outside the "
                      f"output folder {root} ({real_root}); expected a name inside it (no '..', no absolute path, no "
                      f"link leading out): correct the entry or remove it")
    return path


def inside_lexically(root: str | os.PathLike, relative: str | os.PathLike, source: str | None = None) -> str:
    """`inside` without following links (for a path that may also be read through a linked folder): `relative`
    made normal (`a/../b` -> `b`) must stay below `root`."""
    path = os.path.join(root, relative)
    if os.path.isabs(relative) or not _within(os.path.abspath(root), os.path.abspath(path)):
        where = f"{source}: " if source else ""
        raise BadFile(f"{where}the entry {str(relative)!r} would be written at {os.path.abspath(path)}, outside the "
                      f"output folder {root}; expected a name inside it (no '..', no absolute path): correct the "
                      f"entry or remove it")
    return path


def refuse_existing(path: str | os.PathLike, overwrite: bool = False, flag: str = "--overwrite") -> None:
    """`OutputExists` if `path` is a folder holding entries or an existing file, unless `overwrite`; `flag` is
    how the user says overwrite (a command's option, or a function's keyword)."""
    if overwrite or not os.path.lexists(path):
        return
    if os.path.isdir(path):
        count = sum(1 for _ in os.scandir(path))
        if count:
            raise OutputExists(f"{path}: the output folder already holds {count} entr{'y' if count == 1 else 'ies'}; "
                               f"choose a new or empty folder, or pass {flag} to write into it")
        return
    raise OutputExists(f"{path}: the output file exists; choose another name, or pass {flag} to replace it")


def refuse_existing_files(paths: Iterable[str | os.PathLike], overwrite: bool = False,
                          flag: str = "--overwrite") -> None:
    """`OutputExists` naming the first of `paths` that exists, unless `overwrite` (a command writing named files
    into a folder that may hold others: the `.rec` beside its `.bin` benchmarks)."""
    if overwrite:
        return
    existing = [str(p) for p in paths if os.path.lexists(p)]
    if existing:
        more = f" (and {len(existing) - 1} more of its outputs)" if len(existing) > 1 else ""
        raise OutputExists(f"{existing[0]}: the output file exists{more}; choose another output, or pass {flag} to "
                           f"replace it")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `target` to write to; renamed over `target` when the block ends without an
    error, removed when it raises (or is interrupted)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    os.close(fd)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; an output gets the usual permissions
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(target: str | os.PathLike, data: bytes | str, encoding: str = "utf-8", fsync: bool = True) -> Path:
    """`data` (bytes, or text in `encoding`) written whole to `target` or not at all; returns `target`. `fsync`:
    on the disk before the rename (a power cut too), not only whole for the processes that read it after a kill;
    off for the many small files of one output folder."""
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    return Path(target)
