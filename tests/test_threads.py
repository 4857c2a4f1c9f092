"""The thread rule (elasticface.utils.threads): the cores this process may use, OMP_NUM_THREADS honoured,
`trainer.threads` checked, and one log line with the choice."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from elasticface.utils.threads import (
    affinity_cores,
    allowed_cores,
    apply_threads,
    cgroup_cpu_limit,
    choose_threads,
)

from conftest import ROOT


def _cgroup(tmp_path: Path, files: dict[str, str], own: str = "0::/\n") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(own)
    return root, proc


@pytest.mark.parametrize(
    "files,own,expected",
    [
        ({"cpu.max": "max 100000\n"}, "0::/\n", None),  # v2, no quota
        ({"cpu.max": "200000 100000\n"}, "0::/\n", 2),  # v2, 2 cores
        ({"cpu.max": "150000 100000\n"}, "0::/\n", 1),  # 1.5 cores: whole cores only
        ({"cpu.max": "50000 100000\n"}, "0::/\n", 1),  # half a core: still one thread
        ({"job/cpu.max": "300000 100000\n", "cpu.max": "max 100000\n"}, "0::/job\n", 3),  # the process's own cgroup
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, "4:cpu,cpuacct:/\n", None),  # v1
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, "4:cpu,cpuacct:/\n", 4),
        ({}, "0::/\n", None),  # no cgroup files (macOS, a bare chroot)
    ],
)
def test_cgroup_quota_in_whole_cores(tmp_path, files, own, expected):
    root, proc = _cgroup(tmp_path, files, own)
    assert cgroup_cpu_limit(root, proc) == expected


def test_allowed_cores_is_the_affinity_or_fewer():
    cores = allowed_cores()
    assert 1 <= cores <= affinity_cores()
    if hasattr(os, "sched_getaffinity"):
        assert affinity_cores() == len(os.sched_getaffinity(0))


def test_auto_takes_the_share_of_the_allowed_cores():
    assert choose_threads("auto", cores=8, environ={}).threads == 8
    assert choose_threads(None, processes=2, cores=8, environ={}).threads == 4
    assert choose_threads("auto", processes=3, cores=8, environ={}).threads == 2
    assert choose_threads("auto", processes=4, cores=2, environ={}).threads == 1  # never 0


def test_omp_num_threads_is_honoured_and_an_explicit_count_wins():
    assert choose_threads("auto", cores=8, environ={"OMP_NUM_THREADS": "3"}).threads == 3
    assert choose_threads(2, cores=8, environ={"OMP_NUM_THREADS": "3"}).threads == 2
    assert choose_threads("auto", cores=8, environ={"OMP_NUM_THREADS": " "}).threads == 8  # empty: unset


@pytest.mark.parametrize("requested,setting", [(5, "trainer.threads"), ("auto", "OMP_NUM_THREADS")])
def test_more_than_the_share_is_clamped_with_one_line(requested, setting, caplog):
    with caplog.at_level(logging.WARNING, logger="elasticface.utils.threads"):
        choice = choose_threads(requested, processes=2, cores=4, environ={"OMP_NUM_THREADS": "5"})
    assert choice.threads == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"{setting}=5" in lines[0] and "using 2 thread(s)" in lines[0], lines


@pytest.mark.parametrize("bad", [0, -1, "0", "two", 1.5, True])
def test_zero_negative_or_not_whole_is_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=r"trainer\.threads="):
        choose_threads(bad, cores=2, environ={})
    with pytest.raises(ValueError, match=r"OMP_NUM_THREADS="):
        choose_threads("auto", cores=2, environ={"OMP_NUM_THREADS": str(bad)})


def test_apply_sets_torch_and_the_environment_for_child_processes(monkeypatch, caplog):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with caplog.at_level(logging.INFO, logger="elasticface.utils.threads"):
        apply_threads(choose_threads(1, cores=2, environ={}))
    assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    assert [r.getMessage() for r in caplog.records] == ["torch threads: 1 (trainer.threads=1: 2 core(s) allowed)"]


def test_ddp_processes_share_the_node(tmp_path):
    from conftest import compose_train
    from elasticface.training import processes_per_node

    assert processes_per_node(compose_train(["debug=tiny"], tmp_path).trainer) == 1
    assert processes_per_node(compose_train(["debug=tiny", "trainer=ddp_cpu"], tmp_path).trainer) == 2
    cfg = compose_train(["debug=tiny", "trainer=ddp_cpu", "trainer.devices=3"], tmp_path)
    assert processes_per_node(cfg.trainer) == 3


def test_parallel_sweep_jobs_share_the_node(tmp_path):
    """launcher=joblib runs 2 jobs at once: each takes half the cores, DDP processes on top divide further."""
    from conftest import compose_train
    from elasticface.training import processes_sharing_cores

    assert processes_sharing_cores(compose_train(["debug=tiny"], tmp_path)) == 1
    assert processes_sharing_cores(compose_train(["debug=tiny", "launcher=joblib"], tmp_path)) == 2
    cfg = compose_train(["debug=tiny", "launcher=joblib", "parallel_jobs=3", "trainer=ddp_cpu"], tmp_path)
    assert processes_sharing_cores(cfg) == 6
    assert choose_threads("auto", processes=processes_sharing_cores(cfg), cores=12, environ={}).threads == 2


@pytest.mark.slow  # test_zero_negative_or_not_whole_is_refused... holds the rule
def test_train_command_refuses_zero_threads_before_reading_data(tmp_path):
    """What the user types: `python train.py trainer.threads=0` stops at once, naming the key."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=tiny", "trainer.threads=0"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 2  # the config's rule, before Hydra starts: one line
    assert out.stderr.strip() == ("elasticface-train: error: trainer.threads=0: out of range; expected an integer "
                                  ">= 1, or auto")
    assert not list(tmp_path.glob("logs/train/runs/*/checkpoints"))


def test_loader_workers_follow_the_cores_a_run_may_use(monkeypatch):
    """data.num_workers=auto: the allowed cores shared by the processes training on them, 1 to 4; a count as typed."""
    import elasticface.data.datamodule as datamodule

    for cores, processes, workers in ((1, 1, 1), (2, 1, 2), (2, 2, 1), (16, 1, 4), (16, 8, 2), (3, 4, 1)):
        monkeypatch.setattr(datamodule, "allowed_cores", lambda cores=cores: cores)
        assert datamodule.loader_workers("auto", processes) == workers, (cores, processes)
    assert datamodule.loader_workers(8) == 8 and datamodule.loader_workers(0) == 0
    for bad in (-1, "many", True):
        with pytest.raises(ValueError, match=r"data.num_workers="):
            datamodule.loader_workers(bad)
