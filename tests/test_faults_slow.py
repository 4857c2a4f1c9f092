"""Faults, with figures: a training run killed with SIGKILL 20 times and resumed each time ends as the run never
interrupted; a checkpoint that does not fit on a full disk ends the run with one line, the previous one whole.

The run is test_survival_slow's tiny CPU run (COMMON: 18 steps, a checkpoint every 2). The kills land at seeded
random moments of each resumed process (start-up, restoring, training, validation) and, for some, the moment a
temporary checkpoint file appears (a write in progress, checkpointing/atomic_save.py). After each kill every
checkpoint file present must load with `torch.load(weights_only=True)`; at the end the final checkpoint's tensors
and val/acc_mean must equal the uninterrupted run's. The figures are printed (`-s`) and in docs/long_runs.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from test_survival_slow import env, start, train_cmd

pytestmark = pytest.mark.slow

KILLS = 20
#: of the 20, the kills timed on a temporary checkpoint file appearing (the others: a seeded random delay)
ON_WRITE = 6
SEED = 20240
LAST_STEP = 18  # COMMON: 6 epochs of 3 steps


def temporaries(checkpoints: Path) -> list[str]:
    """The checkpoint writes in progress (or cut by a kill): atomic_save's `.<name>.*.tmp` files."""
    if not checkpoints.is_dir():
        return []
    return sorted(e.name for e in os.scandir(checkpoints)
                  if e.name.startswith(".") and ".ckpt." in e.name and e.name.endswith(".tmp"))


def checkpoint_files(run_dir: Path) -> list[Path]:
    return sorted([*(run_dir / "checkpoints").glob("*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")])


def state_of(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def same_value(a, b) -> bool:
    """Tensors equal by torch.equal (a NaN where the other has one: `best_acc_mean` before any validation), other
    entries (a module's `_extra_state`) by ==."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return type(a) is type(b) and a == b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()])
    return torch.equal(a, b)


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The uninterrupted run, and how long it took to write its first checkpoint (the kills' time scale)."""
    run_dir = tmp_path_factory.mktemp("faults_reference") / "run"
    log = run_dir.parent / "reference.log"
    began = time.monotonic()
    proc = start(train_cmd(run_dir), log, env())
    first = run_dir / "checkpoints" / "step0000002.ckpt"
    while not first.exists() and proc.poll() is None:
        time.sleep(0.01)
    to_first_checkpoint = time.monotonic() - began
    assert proc.wait(timeout=900) == 0, log.read_text()[-3000:]
    return {"dir": run_dir, "to_first_checkpoint": to_first_checkpoint, "seconds": time.monotonic() - began}


def kill_at(proc: subprocess.Popen, checkpoints: Path, kind: str, delay: float) -> None:
    """SIGKILL `proc` after `delay` seconds, or (kind "write") as soon as a temporary checkpoint file appears."""
    deadline = time.monotonic() + (delay if kind == "delay" else 900)
    while time.monotonic() < deadline and proc.poll() is None:
        if kind == "write" and temporaries(checkpoints):
            break
        time.sleep(0.002 if kind == "write" else 0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)


def test_twenty_kill_9s_at_random_moments_resume_to_the_uninterrupted_run(reference, tmp_path, record_property):
    began = time.monotonic()
    rng = random.Random(SEED)
    plan = ["write"] * ON_WRITE + ["delay"] * (KILLS - ON_WRITE)
    rng.shuffle(plan)
    horizon = 1.2 * reference["to_first_checkpoint"]  # start-up, restoring, and a checkpoint or so of training
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    kills = during_write = resumes = 0
    steps = []
    for i, kind in enumerate(plan):
        resumed_from = (torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=True)["global_step"]
                        if (checkpoints / "last.ckpt").exists() else 0)
        # near the end a late kill could let the run finish: the remaining delays stay in start-up and restoring
        delay = rng.uniform(0.2, horizon if resumed_from < LAST_STEP - 4 else horizon / 2)
        log = tmp_path / f"run_{i:02d}.log"
        stale = set(temporaries(checkpoints))  # an earlier kill's, if the last process died before removing them
        proc = start(train_cmd(run_dir, "resume=auto"), log, env())
        resumes += i > 0
        kill_at(proc, checkpoints, kind, delay)
        assert proc.returncode == -signal.SIGKILL, (
            f"kill {i + 1} ({kind}, {delay:.1f} s): the run ended (exit {proc.returncode}) before it: "
            f"{log.read_text()[-3000:]}")
        kills += 1
        cut = sorted(set(temporaries(checkpoints)) - stale)  # this process's write, cut by the kill
        during_write += bool(cut)
        for path in checkpoint_files(run_dir):  # never a corrupt checkpoint: each file present loads
            try:
                torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
                pytest.fail(f"kill {i + 1} ({kind}) left {path.name} unreadable: {exc}")
        steps.append((kind, round(delay, 1) if kind == "delay" else None, resumed_from, cut))
    assert not (run_dir / "summary.json").exists()
    log = tmp_path / "run_final.log"
    final = subprocess.run(train_cmd(run_dir, "resume=auto"), cwd=ROOT, env=env(), capture_output=True, text=True,
                           timeout=900)
    resumes += 1
    assert final.returncode == 0, final.stderr[-3000:]
    assert not temporaries(checkpoints), "the last run leaves no temporary checkpoint file"

    ref_dir = reference["dir"]
    identical = same_tensors(state_of(checkpoints / "last.ckpt"), state_of(ref_dir / "checkpoints" / "last.ckpt"))
    summary = json.loads((run_dir / "summary.json").read_text())
    ref_summary = json.loads((ref_dir / "summary.json").read_text())
    same_accuracy = summary["val/acc_mean"]["final"] == ref_summary["val/acc_mean"]["final"]
    figures = {"kills": kills, "during_checkpoint_write": during_write, "resumes": resumes,
               "identical": "yes" if identical and same_accuracy else "no",
               "val/acc_mean": summary["val/acc_mean"]["final"], "seconds": round(time.monotonic() - began),
               "reference_seconds": round(reference["seconds"]), "delay_horizon_s": round(horizon, 1)}
    for key, value in figures.items():
        record_property(key, value)
    print(f"\nfaults: {json.dumps(figures)}\nkills (kind, delay s, resumed from step, write cut): {steps}")
    assert kills == KILLS and resumes == KILLS
    assert during_write >= 3, f"only {during_write} kills landed during a checkpoint write: {steps}"
    assert identical, "the final weights differ from the uninterrupted run's"
    assert same_accuracy, (summary["val/acc_mean"], ref_summary["val/acc_mean"])
    assert summary["global_step"] == ref_summary["global_step"] == LAST_STEP


# -- a full disk ------------------------------------------------------------------------------------------------


def _mount_tmpfs(where: Path, kib: int) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where.mkdir(parents=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {out.stderr.strip()}")


class Watch(threading.Thread):
    """The content (SHA-256) of `path` each time it changes, while the run goes on."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.seen, self.done = path, [], threading.Event()

    def run(self) -> None:
        stamp = None
        while not self.done.is_set():
            try:
                now = self.path.stat().st_mtime_ns
                if now != stamp:
                    stamp = now
                    self.seen.append(hashlib.sha256(self.path.read_bytes()).hexdigest())
            except FileNotFoundError:
                pass
            time.sleep(0.02)


def test_a_checkpoint_on_a_full_disk_ends_with_one_line_and_keeps_the_previous_one(reference, tmp_path,
                                                                                   record_property):
    """The run's folder on a tmpfs where its first checkpoints fit (step0000002.ckpt and last.ckpt, 2 x ~4 MB)
    and the next does not: the run ends with one line naming the file and "no space left", exit 2, and last.ckpt
    is the step-2 checkpoint, whole (it loads, and holds the uninterrupted run's step-2 weights)."""
    one = (reference["dir"] / "checkpoints" / "step0000002.ckpt").stat().st_size
    kib = (2 * one + one // 3) // 1024  # two checkpoints and the logs fit; a third checkpoint does not
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, kib)
    try:
        run_dir = disk / "run"
        last = run_dir / "checkpoints" / "last.ckpt"
        watch = Watch(last)
        watch.start()
        began = time.monotonic()
        out = subprocess.run(train_cmd(run_dir), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
        seconds = time.monotonic() - began
        watch.done.set()
        watch.join()
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        record_property("full_disk_line", lines[-1] if lines else "")
        record_property("full_disk_exit", out.returncode)
        print(f"\nfull disk ({kib} KiB tmpfs, exit {out.returncode}, {seconds:.0f} s): {lines}")
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
        assert len(lines) == 1, lines
        assert "no space left" in lines[0] and str(run_dir / "checkpoints") in lines[0], lines[0]
        assert not temporaries(run_dir / "checkpoints"), "the cut write's temporary file is removed"
        assert watch.seen and hashlib.sha256(last.read_bytes()).hexdigest() == watch.seen[-1], (
            "last.ckpt is what it was before the write that did not fit")
        kept = torch.load(last, map_location="cpu", weights_only=True)
        assert kept["global_step"] == 2
        assert same_tensors(kept["state_dict"], state_of(reference["dir"] / "checkpoints" / "step0000002.ckpt"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)

