"""What a run writes to a log and a terminal: the run's choices in a few lines (the whole config tree on request),
plain progress lines wherever a bar cannot draw, the summary (a smoke run saying it is one), and no warning a user
cannot act on.

The commands run as a user types them, from a fresh folder, with an `srun` on PATH (what `make slurm-up` installs)
in some and without it in others: Lightning's SLURM hint must not appear outside a SLURM job either way.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import warnings

import pytest
from conftest import ROOT
from helpers.terminal import open_terminal, run_on_terminal

#: a warning as the libraries print one: a log record at WARNING or above (Hydra's format), torch's own log
#: format (`W1128 08:59:08.009 ...`), Python's warnings (`file.py:12: message`), or a named warning category
WARNING_LINE = re.compile(r"\]\[(WARNING|ERROR|CRITICAL)\]|^[WE]\d{4} |^\S+\.py:\d+: |\w+Warning\b")
#: warning lines a run may print: each one a user can act on. Empty on this machine's runs; listed here so that a
#: machine where one appears passes with its reason written down, and nothing else does.
ALLOWED = (
    # no C++ compiler for model.compile: install g++ or set model.compile=false (utils/speed.py)
    re.compile(r"model\.compile: torch\.compile's inductor backend needs a toolchain"),
)
#: the make train command at a size that runs in seconds: its defaults otherwise (worker processes, the model summary,
#: a progress line every 10 steps), eager (compiling costs more than this trains; the full run below compiles)
SMALL = ("trainer.max_epochs=1 data.batch_size=8 data.train_dataset.num_identities=16 "
         "data.train_dataset.images_per_identity=6 data.val_sets.num_identities=10 data.val_sets.num_pairs=40 "
         "model.compile=false")


def warning_lines(text: str) -> list[str]:
    """The lines of `text` that are warnings and not ALLOWED."""
    return [line for line in text.splitlines()
            if WARNING_LINE.search(line) and not any(p.search(line) for p in ALLOWED)]


@pytest.fixture
def user_env():
    """The environment of a user outside any SLURM job."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


@pytest.fixture
def slurm_env(user_env, tmp_path):
    """`user_env` with SLURM's `srun` on PATH (a stand-in: only whether it is there matters to Lightning) and an
    `nvcc` (torch's CUDA extension finder looks for one)."""
    tools = tmp_path / "slurm_bin"
    tools.mkdir()
    for name in ("srun", "nvcc"):
        (tools / name).write_text('#!/bin/sh\necho "$0: a stand-in" >&2\nexit 1\n')
        (tools / name).chmod(0o755)
    return {**user_env, "PATH": f"{tools}{os.pathsep}{user_env['PATH']}"}


def _fresh(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def test_log_of_a_run_is_plain_and_complete(tmp_path, slurm_env):
    """`python train.py debug=tiny` into a file, with SLURM installed, as on a machine that never ran matplotlib: the
    overview, a line per logging step, the summary saying it is a smoke run, no warning, no first-run line."""
    env = {**slurm_env, "MPLCONFIGDIR": str(tmp_path / "matplotlib")}  # no font cache yet
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=tiny"], cwd=_fresh(tmp_path), env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert warning_lines(text) == [], text[-3000:]
    assert "💡" not in text and "Tip:" not in text, "no Lightning advertising tips"
    assert "fontManager" not in text and (tmp_path / "matplotlib").is_dir(), "matplotlib built its cache, quietly"
    assert "\r" not in text and "\x1b[" not in text, "no progress-bar carriage returns or escape codes in a file"
    assert "task_name" not in text, "the config tree only with extras.print_config=full"
    overview = text[text.index("this run:"):].splitlines()[1:7]
    assert [line.split()[0] for line in overview] == ["head", "backbone", "data", "training", "devices", "folder"]
    assert "elastic_arc  m=0.5  s=2.752 (class_count)  sigma=0.05" in overview[0]
    assert "2 epochs = 6 steps" in overview[3] and "compile false -> eager on CPU" in overview[4]
    progress = [line for line in text.splitlines() if "step " in line and "loss " in line]
    assert len(progress) == 6 and "step 6/6" in progress[-1], "a plain line per logging step (every step in debug=tiny)"
    assert sum("validation at step" in line for line in text.splitlines()) == 2
    assert "a smoke run (debug=tiny, 6 steps)" in text and "accuracy after a few steps is not a result" in text
    (run_dir,) = (tmp_path / "work" / "logs" / "train" / "runs").iterdir()
    assert f"folder    logs/train/runs/{run_dir.name}" in overview[5]
    log = (run_dir / "train.log").read_text()
    assert "verification accuracy on identities never seen in training" in log, "the summary is in the log file"
    assert "step 6/6" in log and "this run:" in log and "💡" not in log


def test_the_bar_draws_only_on_a_terminal_with_a_width():
    from elasticface.callbacks.progress import LoggingStepBar, LogProgress, bar_can_draw, progress_bar

    for columns, draws in ((0, False), (80, True)):
        controller, terminal = open_terminal(columns)
        with os.fdopen(terminal, "w") as stream:
            assert bar_can_draw(stream) is draws, columns
            saved, sys.stdout = sys.stdout, stream
            try:
                assert isinstance(progress_bar(), LoggingStepBar if draws else LogProgress)
            finally:
                sys.stdout = saved
        os.close(controller)
    read, write = os.pipe()
    with os.fdopen(read) as r, os.fdopen(write, "w") as w:
        assert not bar_can_draw(w) and not bar_can_draw(r)


@pytest.mark.slow  # make test runs the README's make train; bar_can_draw holds the rule
def test_make_train_on_a_terminal_of_zero_columns(tmp_path, user_env):
    """`make train`'s command (its defaults: worker processes, the model summary, a line every 10 steps) at a small
    size, from a fresh folder, on a terminal that reports no width (some CI runners, `script`): the bar cannot draw
    there, so the log lines come instead. No SLURM installed (the test above has it)."""
    cmd = ["make", "-s", "-f", str(ROOT / "Makefile"), "train", f"ARGS={SMALL}"]
    status, text = run_on_terminal(cmd, 0, _fresh(tmp_path), user_env)
    assert status == 0, text[-3000:]
    assert warning_lines(text) == [], text[-3000:]
    assert "step 10/12" in text, "a progress line every trainer.log_every_n_steps (10) steps"
    assert "FLOPs" not in text, "no FLOPs figure: nothing counted them"
    assert "| backbone    | IResNet" in text and "parameters (512 not trained)" in text, "the model summary"
    assert text.count("this run:") == 1 and "batch 8  lr 0.1 (sgd, multistep)  1 epoch = 12 steps" in text
    assert "task_name" not in text and "a smoke run" not in text, "no tree by default; only a debug run is a smoke run"


@pytest.mark.slow
def test_make_train_in_full_prints_no_warning(tmp_path, slurm_env):
    """`make train` as the README gives it (compiled where model.compile=auto compiles), SLURM installed."""
    out = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "train"], cwd=_fresh(tmp_path), env=slurm_env,
                         capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert warning_lines(text) == [], text[-3000:]
    assert "gain over raw pixels" in text and "a smoke run" not in text


def test_library_noise_is_silenced_at_its_source_only(slurm_env, monkeypatch):
    """The messages are real without `quiet_library_noise` (so this test can fail), gone with it; Lightning's srun
    hint stays inside a SLURM allocation, where a job not started by srun may hang."""
    import torch
    import torch.utils.cpp_extension as cpp_extension
    from lightning_fabric.plugins.environments import SLURMEnvironment

    from elasticface.utils.console import NO_CUDA_RUNTIME, SRUN_HINT, quiet_library_noise

    monkeypatch.setenv("PATH", slurm_env["PATH"])  # srun and nvcc on it
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(cpp_extension.__name__)
    logger.addHandler(handler)
    saved_filters = list(logger.filters)
    logger.filters.clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cpp_extension._find_cuda_home()  # torch's CUDA finder: logs when it finds nvcc and no GPU
            SLURMEnvironment.detect()  # Lightning's SLURM check: warns when srun is on PATH and did not start us
            assert any(SRUN_HINT in str(w.message) for w in caught)
            if torch.version.cuda and not torch.cuda.is_available():  # a CUDA build of torch on a CPU machine
                assert any(NO_CUDA_RUNTIME in r.getMessage() for r in records)
            records.clear(), caught.clear()
            quiet_library_noise()
            cpp_extension._find_cuda_home()
            SLURMEnvironment.detect()
            assert not records and not caught, (records, [str(w.message) for w in caught])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            monkeypatch.setenv("SLURM_JOB_ID", "7")
            quiet_library_noise()
            SLURMEnvironment.detect()
            assert any(SRUN_HINT in str(w.message) for w in caught), "inside a SLURM job the hint stays"
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = saved_filters


@pytest.mark.slow  # a debug=tiny run in a process of its own on one core
def test_a_run_on_one_core_starts_one_loader_worker_and_no_warning(tmp_path, user_env):
    """data.num_workers=auto on a machine (or a SLURM allocation) of one core: one worker, so neither torch's nor
    torchdata's loader warns that the workers exceed the cores."""
    if not shutil.which("taskset"):
        pytest.skip("taskset (util-linux) is not installed")
    env = {k: v for k, v in user_env.items() if k != "OMP_NUM_THREADS"}  # the tests' own thread count apart
    out = subprocess.run(["taskset", "-c", "0", sys.executable, str(ROOT / "train.py"), "debug=tiny"],
                         cwd=_fresh(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert warning_lines(text) == [], text[-3000:]
    assert "torch threads: 1 (trainer.threads=auto: 1 core(s) allowed)" in text


def test_warning_lines_are_recognised():
    """The oracle of the tests above, on lines the libraries printed before they were silenced."""
    lines = {
        "W1128 08:59:08.009000 4622 torch/utils/cpp_extension.py:183] No CUDA runtime is found": True,
        ".venv/lib/python3.11/site-packages/pytorch_lightning/utilities/_pytree.py:21: `isinstance(treespec, "
        "LeafSpec)` is deprecated": True,
        "[2026-11-28 09:00:13,094][elasticface.training][WARNING] - preempted at step 2": True,
        "lightning_fabric/plugins/environments/slurm.py:204: PossibleUserWarning: The `srun` command": True,
        # the loaders' worker warnings (data.num_workers above the cores: data/datamodule.py's loader_workers)
        ".venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:627: UserWarning: This DataLoader will "
        "create 4 worker processes in total. Our suggested max number of worker in current system is 2": True,
        ".venv/lib/python3.11/site-packages/torchdata/stateful_dataloader/stateful_dataloader.py:511: UserWarning: "
        "This DataLoader will create 4 worker processes in total": True,
        "[2026-11-28 09:00:13,094][elasticface.callbacks.progress][INFO] - epoch 1/5  step 10/465  loss 3.5": False,
        "  devices   1 cpu  precision 32-true  compile auto -> eager on CPU (AVX2)": False,
    }
    for line, is_warning in lines.items():
        assert bool(warning_lines(line)) is is_warning, line


def test_print_config_takes_short_full_or_false(tiny_cfg, capsys):
    from elasticface.utils.config import ConfigError
    from elasticface.utils.console import print_config_mode, print_config_tree

    assert [print_config_mode(v) for v in ("short", "full", False)] == ["short", "full", None]
    for bad in ("tree", True, None, 1):
        with pytest.raises(ConfigError, match=r"extras.print_config=.*: expected short .*, full .* or false"):
            print_config_mode(bad)
    print_config_tree(tiny_cfg(), {"head": "elastic_arc", "data": "synthetic"})
    tree = capsys.readouterr().out
    assert "├── task_name: train" in tree and "data (synthetic)" in tree and "head=elastic_arc" in tree


@pytest.mark.slow  # test_print_config_takes_short_full_or_false holds the rule
def test_an_unknown_print_config_is_one_line_exit_2(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "extras.print_config=tree"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == ["elasticface-train: error: extras.print_config='tree': expected short (the "
                                       "run's choices in a few lines), full (those and the whole config tree) or "
                                       "false (neither)"]


def test_the_model_summary_shows_flops_only_when_they_were_counted():
    """Lightning counts FLOPs only through an `example_input_array`; without one its column and total read 0."""
    from elasticface.callbacks.model_summary import summary_table

    def columns(flops: list[str]) -> list[tuple[str, list[str]]]:
        return [(" ", ["0", "1"]), ("Name", ["backbone", "classifier"]), ("Type", ["IResNet", "Classifier"]),
                ("Params", ["3.5 M", "8.2 K"]), ("Mode", ["train", "train"]), ("FLOPs", flops)]

    uncounted = summary_table(columns(["0", "0"]), 3_508_704, 3_508_192, 14.0, {"train": 55, "eval": 0}, 0)
    assert uncounted.splitlines()[0] == "  | Name       | Type       | Params | Mode"
    assert uncounted.splitlines()[2] == "0 | backbone   | IResNet    | 3.5 M  | train"
    assert uncounted.splitlines()[-1] == ("3.5 M parameters (512 not trained), 14.000 MB; modules in train mode 55, "
                                          "in eval mode 0")
    counted = summary_table(columns(["1.2 M", "0"]), 3_508_704, 3_508_192, 14.0, {"train": 55, "eval": 0}, 1_200_000)
    assert counted.splitlines()[0].endswith("| Mode  | FLOPs") and counted.endswith("; 1.2 M FLOPs")
