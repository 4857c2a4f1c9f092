"""launcher=slurm against a real SLURM (`make test-cluster` starts a one-host one: scripts/slurm.sh).

Every job goes through sbatch to slurmctld and runs under slurmd; preemption comes from SLURM's own time
limit, the requeue through the real `scontrol`, the cancel through `scancel`, DDP through `srun`. The sweep
is the README's command as typed, on `debug=tiny` sizes, from a fresh working directory.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import ROOT

pytestmark = pytest.mark.cluster

BIN = Path(sys.executable).parent
#: the README's local-cluster requests (one CPU task per job, no GPU), for the tests' own commands
CPU_JOB = ["trainer=cpu", "hydra.launcher.tasks_per_node=1", "hydra.launcher.gpus_per_node=0",
           "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2"]


@pytest.fixture(scope="module", autouse=True)
def cluster() -> None:
    """The cluster answers, or every test here fails naming how to start one (never a skip)."""
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    if out.returncode != 0 or "idle" not in out.stdout + "mix alloc":
        pytest.fail(f"no SLURM cluster answers (sinfo: {out.stderr.strip() or out.stdout.strip()}): run "
                    "`make test-cluster`, or `make slurm-up` and the `export SLURM_CONF=...` line it prints")


def train(*args: str, cwd: Path) -> subprocess.Popen:
    """`python train.py ARGS` as a user starts it in `cwd` (outputs under cwd/logs); output to a file."""
    log = open(cwd / "sweep.log", "a")
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "WANDB_MODE": "offline"})


def finish(proc: subprocess.Popen, cwd: Path, timeout: float = 400) -> str:
    proc.wait(timeout=timeout)
    return (cwd / "sweep.log").read_text()


def sweep_dir(cwd: Path) -> Path:
    (sweep,) = (cwd / "logs" / "train" / "multiruns").iterdir()
    return sweep


def job_dir(sweep: Path, number: int) -> Path:
    (found,) = sweep.glob(f"{number}_*")
    return found


def slurm_job(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (slurmctld keeps finished jobs for MinJobAge, 300 s)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True)
    return dict(re.findall(r"(\w+)=(\S*)", out.stdout))


def finished_job(job_id: str, timeout: float = 60) -> dict[str, str]:
    """The job once SLURM has seen it end: its result file is written a moment before its process exits."""
    deadline = time.monotonic() + timeout
    while (job := slurm_job(job_id))["JobState"] in ("RUNNING", "COMPLETING") and time.monotonic() < deadline:
        time.sleep(0.5)
    return job


def queued() -> set[str]:
    """Every job slurmctld knows, finished ones included."""
    return set(subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True).stdout.split())


def job_folders(sweep: Path) -> list[str]:
    """submitit's job folders, `.submitit/<job id>` or `<array id>_<task>`, sorted; not the pickles it writes beside
    them before submitting (`<uuid hex>.pkl`, whose name may start with a digit too)."""
    folder = sweep / ".submitit"
    return sorted(p.name for p in folder.iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name)) if folder.is_dir() else []


def array_job_id(sweep: Path) -> str:
    """The SLURM id of the sweep's array (submitit's folder is named after it: .submitit/<id>_<task>)."""
    return job_folders(sweep)[0].split("_")[0]


def losses(metrics_csv: Path) -> dict[int, str]:
    with open(metrics_csv) as f:
        return {int(row["step"]): row["train/loss"] for row in csv.DictReader(f) if row.get("train/loss")}


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]


def equal(a: Any, b: Any) -> bool:
    """Bit for bit, through the dicts a state_dict may hold (a head's extra state)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return a == b


def readme_slurm_sweep() -> list[str]:
    """The README's local-cluster sweep, as typed there."""
    text = (ROOT / "README.md").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("python train.py -m launcher=slurm head=")]
    return shlex.split(line)[2:]


def test_readme_sweep_submits_both_jobs_and_the_report_ranks_them(tmp_path):
    out = finish(train(*readme_slurm_sweep(), "debug=tiny", cwd=tmp_path), tmp_path)
    sweep = sweep_dir(tmp_path)
    summaries = sorted(sweep.glob("*/summary.json"))
    assert len(summaries) == 2, out[-3000:]
    job = finished_job(f"{array_job_id(sweep)}_1")
    assert job["JobState"] == "COMPLETED" and job["Partition"] == "debug", job
    report = subprocess.run([str(BIN / "elasticface-report"), str(sweep)], capture_output=True, text=True,
                            cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "ArcFace" in report.stdout and "ElasticFace-Arc" in report.stdout
    with open(sweep / "report.csv") as f:
        assert len(list(csv.DictReader(f))) == 2


def test_time_limit_signal_checkpoints_requeues_and_resumes_to_the_uninterrupted_weights(tmp_path):
    """A 1-minute limit (SLURM signals 10 s before it, or earlier: its timer is coarse) against the same job
    with time to spare, both on the cluster at once. 40 epochs: 12 ended inside the minute on an idle machine."""
    run = ["-m", "launcher=slurm", *CPU_JOB, "debug=tiny", "trainer.max_epochs=40"]
    (tmp_path / "limited").mkdir()
    (tmp_path / "reference").mkdir()
    limited = train(*run, "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=10", cwd=tmp_path / "limited")
    reference = train(*run, cwd=tmp_path / "reference")
    # once requeued, the job gets the time it needs (as an admin's `scontrol update` would): one requeue, not one
    # a minute on a busy machine
    deadline = time.monotonic() + 300
    while not any(job_folders(sweep) for sweep in (tmp_path / "limited").glob("logs/train/multiruns/*")) or int(
            slurm_job(array_job_id(sweep_dir(tmp_path / "limited"))).get("Restarts", 0)) == 0:
        assert limited.poll() is None and time.monotonic() < deadline, (tmp_path / "limited" / "sweep.log").read_text()
        time.sleep(1)
    subprocess.run(["scontrol", "update", f"JobId={array_job_id(sweep_dir(tmp_path / 'limited'))}", "TimeLimit=10"],
                   check=True)
    out = finish(limited, tmp_path / "limited", timeout=480)
    ref_out = finish(reference, tmp_path / "reference")
    assert limited.returncode == 0 and reference.returncode == 0, out[-3000:] + ref_out[-2000:]
    sweep = sweep_dir(tmp_path / "limited")
    run_dir = job_dir(sweep, 0)
    log = (run_dir / "train.log").read_text()
    steps = [int(s) for s in re.findall(r"preemption signal SIGUSR2: checkpoint of step (\d+)", log)]
    assert steps and max(steps) > 0, log[-3000:]
    assert "Requeued job" in log
    job = finished_job(array_job_id(sweep))
    assert int(job["Restarts"]) == len(steps) == 1, job
    ref_dir = job_dir(sweep_dir(tmp_path / "reference"), 0)
    expected, got = weights(ref_dir), weights(run_dir)
    assert expected.keys() == got.keys()
    for name in expected:
        assert equal(expected[name], got[name]), f"{name} differs from the uninterrupted run's"
    assert (run_dir / "summary.json").read_text().count('"global_step"') == 1


def test_scancel_of_one_job_names_it_the_other_finishes_and_the_rerun_completes_it(tmp_path):
    sweep_args = ["-m", "launcher=slurm", "head=arcface,elastic_arc", *CPU_JOB, "debug=tiny", "trainer.max_epochs=4"]
    proc = train(*sweep_args, cwd=tmp_path)
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob("logs/train/multiruns/*/1_*/checkpoints/step0000002.ckpt")):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "sweep.log").read_text()[-3000:]
        time.sleep(0.5)
    sweep = sweep_dir(tmp_path)
    cancelled = f"{array_job_id(sweep)}_1"
    subprocess.run(["scancel", cancelled], check=True)
    out = finish(proc, tmp_path)
    assert proc.returncode == 1, out[-3000:]
    error = [line for line in out.splitlines() if line.startswith("elasticface-train: error:")]
    assert len(error) == 1 and "1 of 2 jobs did not finish" in error[0], out[-3000:]
    assert "#1 head=elastic_arc" in error[0] and f"SLURM job {cancelled}: CANCELLED" in error[0], error
    assert (job_dir(sweep, 0) / "summary.json").exists()
    assert not (job_dir(sweep, 1) / "summary.json").exists()

    # the same command again, in the same sweep folder as the message says: job 0 skipped, job 1 continued
    (tmp_path / "sweep.log").rename(tmp_path / "cancelled.log")
    again = finish(train(*sweep_args, f"hydra.sweep.dir={sweep}", cwd=tmp_path), tmp_path)
    assert "finished already" in (job_dir(sweep, 0) / "train.log").read_text(), again[-3000:]
    log1 = (job_dir(sweep, 1) / "train.log").read_text()
    assert re.search(r"resume=auto: continuing .* from .*step\d+\.ckpt|resume=auto: continuing .* from .*last\.ckpt",
                     log1), log1[-2000:]
    assert (job_dir(sweep, 1) / "summary.json").exists(), again[-3000:]
    assert len(list((job_dir(sweep, 0) / "csv").iterdir())) == 1, "the finished job did not train again"


def test_ddp_under_srun_trains_one_run_with_torchruns_losses(tmp_path):
    (tmp_path / "slurm").mkdir()
    (tmp_path / "torchrun").mkdir()
    slurm = train("-m", "launcher=slurm", "trainer=ddp_cpu", "hydra.launcher.tasks_per_node=2",
                  "hydra.launcher.gpus_per_node=0", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2",
                  "debug=tiny", cwd=tmp_path / "slurm")
    torchrun = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node", "2", str(ROOT / "train.py"),
                               "trainer=ddp_cpu", "debug=tiny"], cwd=tmp_path / "torchrun", capture_output=True,
                              text=True, timeout=400)
    out = finish(slurm, tmp_path / "slurm")
    assert slurm.returncode == 0 and torchrun.returncode == 0, out[-3000:] + torchrun.stderr[-3000:]
    run = job_dir(sweep_dir(tmp_path / "slurm"), 0)
    assert len(list(run.glob("summary.json"))) == 1 and len(list(run.glob("csv/version_*"))) == 1
    (reference,) = (tmp_path / "torchrun" / "logs" / "train" / "runs").iterdir()
    expected, got = losses(reference / "csv" / "version_0" / "metrics.csv"), losses(run / "csv" / "version_0" /
                                                                                    "metrics.csv")
    assert expected and got == expected
    sweep = sweep_dir(tmp_path / "slurm")
    job = finished_job(array_job_id(sweep))
    assert job["NumTasks"] == "2", job
    # one srun task per rank, each with its own log: the baselines are computed by rank 0 alone
    task_logs = {task: "".join(p.read_text() for p in sweep.glob(f".submitit/*/*_{task}_log.*")) for task in (0, 1)}
    assert "Seed set" in task_logs[1]
    assert "computed on global rank 0" in task_logs[0] and "computed on global rank" not in task_logs[1]


def test_array_parallelism_1_runs_the_jobs_one_after_another(tmp_path):
    out = finish(train("-m", "launcher=slurm", "head=arcface,cosface", *CPU_JOB, "debug=tiny",
                       "hydra.launcher.array_parallelism=1", cwd=tmp_path), tmp_path)
    sweep = sweep_dir(tmp_path)
    assert len(list(sweep.glob("*/summary.json"))) == 2, out[-3000:]
    array = array_job_id(sweep)
    first, second = finished_job(f"{array}_0"), finished_job(f"{array}_1")
    assert "#SBATCH --array=0-1%1" in (sweep / ".submitit" / array / f"{array}_submission.sh").read_text()
    assert datetime.fromisoformat(first["EndTime"]) <= datetime.fromisoformat(second["StartTime"]), (first, second)


def test_a_halving_sweep_submits_each_round_and_the_survivor_continues_in_its_folder(tmp_path):
    """`halving.eta=2` through sbatch: round 1 is an array of both jobs, round 2 an array of the better one, which
    continues from its own last.ckpt (launcher=slurm's resume=auto) in the folder round 1 made."""
    proc = train("-m", "launcher=slurm", "seed=1,2", *CPU_JOB, "debug=tiny", "trainer.max_epochs=2", "halving.eta=2",
                 cwd=tmp_path)
    out = finish(proc, tmp_path, timeout=600)
    assert proc.returncode == 0, out[-3000:]
    sweep = sweep_dir(tmp_path)
    record = json.loads((sweep / "halving.json").read_text())
    assert [len(r["ranked"]) for r in record["rounds"]] == [2, 1], record
    arrays = sorted({name.split("_")[0] for name in job_folders(sweep)})
    assert len(arrays) == 2, "one sbatch array per round"
    survivor = sweep / record["rounds"][1]["ranked"][0]["folder"]
    summary = json.loads((survivor / "summary.json").read_text())
    assert (summary["epochs"], summary["stopped_at_epoch"]) == (2, None)
    assert len(list((survivor / "csv").glob("version_*"))) == 2, "one run per round, in the same folder"
    assert len([p for p in sweep.iterdir() if (p / ".hydra").is_dir()]) == 2, "one folder per job"


def test_a_partition_the_cluster_lacks_is_one_line_and_nothing_is_queued(tmp_path):
    before = queued()
    proc = train("-m", "launcher=slurm", *CPU_JOB, "hydra.launcher.partition=gpu_a100", "debug=tiny", cwd=tmp_path)
    out = finish(proc, tmp_path, timeout=120)
    assert proc.returncode == 2, out
    (line,) = [line for line in out.splitlines() if "error" in line.lower()]
    assert line.startswith("elasticface-train: error: hydra.launcher.partition=gpu_a100: the cluster refused")
    assert "invalid partition" in line.lower(), line
    # new ids only: a finished job of an earlier test may leave squeue meanwhile (slurmctld's MinJobAge, 300 s)
    assert queued() - before == set(), "no job was queued"
