"""Successive halving over a multirun (`halving.eta=2`): the rounds, a job stopped and continued being the job that was
never stopped, one folder per job, the record, the report, and a sweep interrupted between rounds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY, compose_train
from elasticface.sweeps.halving import Plan, kept, plan
from elasticface.training import run


def test_rounds_as_the_issue_writes_them(tiny_cfg):
    """4 jobs, eta 2, the first budget 1 of 4 epochs: 4 jobs train 1 epoch, 2 go on to 2, 1 to 4 (issue 82)."""
    assert plan(tiny_cfg("trainer.max_epochs=4", "halving.eta=2")) == Plan(2, (1, 2, 4), "val/acc_mean")
    assert [kept(4, 2), kept(2, 2)] == [2, 1]
    assert plan(tiny_cfg("trainer.max_epochs=4", "halving.eta=3")).budgets == (1, 3, 4)
    assert plan(tiny_cfg("trainer.max_epochs=4", "halving.eta=3", "halving.first_epochs=2")).budgets == (2, 4)
    assert plan(tiny_cfg("trainer.max_epochs=8", "halving.eta=2", "halving.first_epochs=2")).budgets == (2, 4, 8)
    assert [kept(11, 3), kept(3, 3), kept(11, 2), kept(5, 2)] == [3, 1, 5, 2]
    assert plan(tiny_cfg()) is None, "off by default"


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    state = torch.load(folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return {k: v for k, v in state["state_dict"].items() if torch.is_tensor(v)}


def test_a_job_stopped_by_a_round_and_continued_is_the_job_never_stopped(tiny_cfg, tmp_path):
    """debug=tiny: 3 steps an epoch, a step checkpoint every 2, so the stop after epoch 1 is saved by the end of the
    fit (a checkpoint Lightning does not count as mid-epoch: resumed, it replayed epoch 0's order before)."""
    stopped = run(tiny_cfg("trainer.max_epochs=3", "halving.stop_epoch=1"))
    assert (stopped["epochs"], stopped["stopped_at_epoch"], stopped["global_step"]) == (1, 1, 3)
    assert stopped["val/acc_mean"]["final"] is not None, "validated where it stopped: the round ranks on it"
    again = run(tiny_cfg("trainer.max_epochs=3", "halving.stop_epoch=1", "resume=auto"))
    assert again["global_step"] == 3, "finished for its budget: skipped"
    resumed = run(tiny_cfg("trainer.max_epochs=3", "resume=auto"))
    assert (resumed["epochs"], resumed["stopped_at_epoch"], resumed["global_step"]) == (3, None, 9)
    whole = run(compose_train(TINY + ["trainer.max_epochs=3"], tmp_path / "whole"))
    assert resumed["val/acc_mean"] == whole["val/acc_mean"]
    ours, reference = _weights(tmp_path), _weights(tmp_path / "whole")
    assert ours.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(ours[name], tensor), name


def _sweep(args: list[str], cwd: Path, **kwargs) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, **kwargs)


SWEEP = ["seed=1,2", *TINY, "trainer.max_epochs=2", "halving.eta=2"]


def test_a_sweep_as_typed_keeps_the_best_half_in_their_own_folders(tmp_path):
    """`python train.py -m seed=1,2 debug=tiny trainer.max_epochs=2 halving.eta=2` from a fresh folder: 2 jobs train
    1 epoch, the better one goes on to 2 in its folder; each summary.json says where it stopped and why."""
    out = _sweep(SWEEP, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    folders = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(folders) == 2, [p.name for p in folders]
    assert all("resume" not in p.name and "stop_epoch" not in p.name for p in folders), "named as round 1 named it"
    record = json.loads((sweep / "halving.json").read_text())
    assert (record["eta"], record["budgets"], record["metric"]) == (2, [1, 2], "val/acc_mean")
    first, last = record["rounds"]
    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in folders}
    values = [r["val/acc_mean"] for r in first["ranked"]]
    assert values == sorted(values, reverse=True) and len(first["kept"]) == 1
    (winner,) = [name for name, s in summaries.items() if s["stopped_at_epoch"] is None]
    assert last["ranked"][0]["folder"] == winner == first["ranked"][0]["folder"], record
    assert summaries[winner]["epochs"] == 2 and "went through all 2 rounds" in summaries[winner]["halving"]["why"]
    for name, summary in summaries.items():
        if name != winner:
            assert (summary["epochs"], summary["stopped_at_epoch"]) == (1, 1)
            assert summary["halving"]["why"].endswith("so it stopped here (1 of 2 epochs)"), summary["halving"]
    assert record["epochs_trained"] == 3 and record["epochs_full_grid"] == 4
    assert "successive halving (eta 2, budgets 1/2 epochs): 3 of the full grid's 4 job-epochs" in out.stdout
    report = subprocess.run([sys.executable, "-m", "elasticface.cli.report", str(sweep)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert "Stopped early by successive halving or a pruner (1), not in the table" in report.stdout
    table = report.stdout.split("Stopped early")[0]
    assert table.count("| ElasticFace-Arc") == 1, "only the job that ran to the end is ranked"


@pytest.mark.slow  # three sweep launches; the sweep above runs in make test
def test_a_sweep_killed_between_rounds_goes_on_with_the_round_it_was_in(tmp_path):
    """Killed once round 1 is recorded, the same command with hydra.sweep.dir=<that sweep> trains only the survivor
    on (the stopped jobs are not launched again), to the same result as a sweep never killed."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", *SWEEP, "trainer.max_epochs=4", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        record = sweep / "halving.json"
        if record.is_file() and len(json.loads(record.read_text())["rounds"]) == 1:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "killed between rounds"
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "round 1 of" not in again.stdout and "round 2 of 3: 1 job(s) to epoch 2 of 4" in again.stdout
    record = json.loads((sweep / "halving.json").read_text())
    assert [r["budget"] for r in record["rounds"]] == [1, 2, 4]
    whole = tmp_path / "whole"
    out = _sweep([*SWEEP, "trainer.max_epochs=4", f"hydra.sweep.dir={whole}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((whole / "halving.json").read_text())["rounds"] == record["rounds"]
    survivor = record["rounds"][-1]["ranked"][0]["folder"]
    for folder in (sweep / r["folder"] for r in record["rounds"][0]["ranked"] if r["folder"] != survivor):
        assert len(list((folder / "csv").glob("version_*"))) == 1, f"{folder} trained again"


def test_the_replay_of_a_full_grid_follows_the_sweepers_rule():
    """benchmarks/bench_halving.py on four jobs whose accuracy after each epoch is written out here. Round 1 (epoch 1):
    job 0 (0.80) and job 1 (0.70) go on; round 2 (epoch 2): job 1 (0.85) beats job 0 (0.75) and goes on to 4. The
    full grid's best at epoch 4 is job 3 (0.95), which halving stopped after epoch 1: the late bloomer it can miss."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_halving", ROOT / "benchmarks" / "bench_halving.py")
    bench = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up there
    spec.loader.exec_module(bench)
    epochs = {0: [0.80, 0.75, 0.80, 0.82], 1: [0.70, 0.85, 0.88, 0.90], 2: [0.60, 0.65, 0.70, 0.72],
              3: [0.50, 0.70, 0.90, 0.95]}
    jobs = [bench.Job(f"{i}_job", {e + 1: v for e, v in enumerate(values)}) for i, values in epochs.items()]
    order, spent = bench.replay(jobs, Plan(2, bench.budgets(2, 1, 4), "val/acc_mean"))
    assert order == [1, 0, 2, 3] and spent == 4 * 1 + 2 * 1 + 1 * 2
    assert bench.budgets(3, 2, 4) == (2, 4) and bench.budgets(2, 1, 8) == (1, 2, 4, 8)
