"""`resume=auto`: start a run again in the same output directory and it does the right thing.

A sweep relaunched with the same `hydra.sweep.dir` (or a requeued SLURM job) skips jobs that finished
(summary.json is written last, only by a run that completed), continues unfinished ones from their
newest checkpoint (`last.ckpt`, or the `hpc_ckpt_*.ckpt` Lightning's SLURM handler writes), and
starts the others fresh. A job that a sweep round's budget stopped (successive halving: summary.json's
`stopped_at_epoch`) is finished for that budget only: given a later one (`halving.stop_epoch`, or none: the full
run) it continues from its checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from elasticface.untrusted import read_checkpoint
from elasticface.utils.remote import refuse_remote
from elasticface.utils.errors import BadValue, MissingPath

log = logging.getLogger(__name__)

RESUME_CHOICES = (None, "auto")


def newest_checkpoint(checkpoint_dir: Path, output_dir: Path) -> Path | None:
    """The most recently written resumable checkpoint of a run, or None."""
    candidates = [p for p in (checkpoint_dir / "last.ckpt",) if p.is_file()]
    candidates += sorted(output_dir.glob("hpc_ckpt_*.ckpt"))
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None


def finished_summary(output_dir: Path) -> dict[str, Any] | None:
    path = output_dir / "summary.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("%s is unreadable; the run is treated as unfinished", path)
        return None


def stopped_before(summary: dict[str, Any], stop_epoch: int | None) -> bool:
    """Whether a run that wrote `summary` stopped at a round's budget short of `stop_epoch` (None: the whole run)."""
    stopped = summary.get("stopped_at_epoch")
    return stopped is not None and (stop_epoch is None or int(stopped) < int(stop_epoch))


def resolve(resume: str | None, ckpt_path: str | None, output_dir: Path, checkpoint_dir: Path,
            stop_epoch: int | None = None) -> tuple[str | None, dict[str, Any] | None]:
    """(checkpoint to resume from, summary of a finished run to return instead of training); `stop_epoch`: the
    epoch a sweep round's budget ends this run at (None: trainer.max_epochs)."""
    if resume not in RESUME_CHOICES:
        raise BadValue(f"resume={resume!r}: expected null (train as told) or auto (skip finished, continue "
                         "unfinished runs in this output directory); to continue a given file use ckpt_path=<file>")
    if ckpt_path is not None:
        special = str(ckpt_path) in ("last", "best", "hpc")
        if not special:
            refuse_remote(ckpt_path, "ckpt_path")
            if not os.path.isfile(ckpt_path):
                raise MissingPath(f"ckpt_path={ckpt_path}: no such checkpoint file")
            read_checkpoint(ckpt_path, mmap=True)  # refused before the run builds or writes anything
        return str(ckpt_path), None
    if resume != "auto":
        return None, None
    summary = finished_summary(output_dir)
    if summary is not None and not stopped_before(summary, stop_epoch):
        log.info("resume=auto: %s finished already (summary.json); skipped", output_dir)
        return None, summary
    found = newest_checkpoint(checkpoint_dir, output_dir)
    if summary is not None and found is None:
        raise MissingPath(f"{output_dir}: stopped after epoch {summary['stopped_at_epoch']} to continue later, but "
                          f"{checkpoint_dir / 'last.ckpt'} is gone; it cannot continue (delete summary.json to train "
                          "it again from the start)")
    if found is not None:
        read_checkpoint(found, mmap=True)
        log.info("resume=auto: continuing %s from %s", output_dir, found)
        return str(found), None
    return None, None
