"""A user's mistake: one line naming the key or file, exit status 2, before any model is built, and no run folder.

The first-day mistakes of docs/security.md's list, typed as a user types them, from a fresh working directory.
Most run in-process through the commands' own `main()` (the same code path, a fraction of the time); a few run
as processes to check the whole contract: the exit status, stderr's one line, no traceback and no Hydra hint,
the time, and that a defect of the project's keeps its traceback.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from elasticface.cli import eval as eval_cli
from elasticface.cli import train as train_cli
from elasticface.cli.config_rules import EVAL, TRAIN, check_config, check_keys
from elasticface.utils.errors import BadFile, MissingPath, UserError
from elasticface.utils.model_files import model_file_kind

Y1 = ROOT / "tests" / "data" / "mxnet" / "y1" / "model-0000.params"
_spec = importlib.util.spec_from_file_location("first_day_mistakes", ROOT / "benchmarks" / "first_day_mistakes.py")
MISTAKES = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(MISTAKES)
TRAIN_MISTAKES, EVAL_MISTAKES = MISTAKES.TRAIN_MISTAKES, MISTAKES.EVAL_MISTAKES


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh working directory holding the files a new user has at hand (the benchmark's)."""
    monkeypatch.chdir(tmp_path)
    return MISTAKES.make_workdir(tmp_path)


def run_main(module, argv: list[str], monkeypatch) -> tuple[int, str]:
    """The command's main() as the shell runs it: (exit status, stderr)."""
    monkeypatch.setattr(sys, "argv", [module.PROG, *argv])
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as ended:
        module.main()
    return ended.value.code, err.getvalue()


@pytest.mark.parametrize("argv,message", TRAIN_MISTAKES, ids=[" ".join(a) for a, _ in TRAIN_MISTAKES])
def test_a_train_mistake_is_one_line_naming_it_before_anything_is_built(argv, message, workdir, monkeypatch):
    status, err = run_main(train_cli, argv, monkeypatch)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("elasticface-train: error: ")
    assert re.search(message, lines[0].removeprefix("elasticface-train: error: ")), lines[0]
    assert not (workdir / "logs").exists()  # no run folder


@pytest.mark.parametrize("argv,message", EVAL_MISTAKES, ids=[" ".join(a)[-60:] for a, _ in EVAL_MISTAKES])
def test_an_eval_mistake_is_one_line_naming_it_before_the_model_loads(argv, message, workdir, monkeypatch):
    status, err = run_main(eval_cli, argv, monkeypatch)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert re.search(message, lines[0].removeprefix("elasticface-eval: error: ")), lines[0]
    assert not (workdir / "logs").exists()


def cli(command: str, *argv: str, cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, str(ROOT / command), *argv], cwd=cwd, capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "src"), **env))
    return out, time.perf_counter() - started


def test_the_contract_as_a_process_one_line_exit_2_no_traceback_in_seconds(workdir):
    """As the shell sees it: stderr is one line, no traceback and no Hydra hint, well within --help's time."""
    out, seconds = cli("eval.py", "weights=notes.txt", "data.val_root=bins", cwd=workdir)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "elasticface-eval: error: weights=notes.txt: not a model file (text starting 'hello world\\n'); expected one "
        "of: a Lightning .ckpt, a backbone .pth/.pt (torch.save), TorchScript, insightface's MXNet model-0000.params, "
        "ONNX .onnx"]
    assert "Traceback" not in out.stdout + out.stderr and "HYDRA_FULL_ERROR" not in out.stdout + out.stderr
    assert seconds < 15, seconds  # torch is not imported for it (measured ~1.5 s; --help ~1.3 s)
    assert not (workdir / "logs").exists()


def test_the_switch_shows_a_mistakes_traceback(workdir):
    out, _ = cli("train.py", "weights=notes.txt", cwd=workdir, ELASTICFACE_TRACEBACK="1")
    assert out.returncode == 2
    assert "Traceback (most recent call last)" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("elasticface-train: error: weights=notes.txt: not a model")


def test_a_defect_keeps_its_traceback_and_exit_1(workdir, monkeypatch):
    """An exception the project did not raise on purpose is not dressed up as a user's mistake."""
    from elasticface.cli.job_failures import checked_job

    def broken(cfg):
        return {}["val/acc_mean"]

    with pytest.raises(KeyError):
        checked_job("elasticface-train", train_cli_cfg(workdir), TRAIN, broken)


def train_cli_cfg(workdir: Path):
    from elasticface.cli.compose import compose_train

    return compose_train(["debug=tiny"], workdir)


@pytest.mark.parametrize("argv,message", [  # a process each (~10 s): the first in the fast suite
    pytest.param(a, m, id=" ".join(a[1:]), marks=[pytest.mark.slow] if i else [])
    for i, (a, m) in enumerate(MISTAKES.TRAIN_JOB_MISTAKES)])
def test_a_mistake_inside_the_job_marks_its_folder_failed(argv, message, workdir):
    """A mistake found only once the job runs (an unknown timm backbone, a head's m out of its range) ends in one
    line too, before any data is read, and its run folder says it failed."""
    out, _ = cli("train.py", *argv, cwd=workdir)
    assert MISTAKES.judge(out, message, "elasticface-train", workdir, in_job=True) == "", out.stderr[-2000:]
    marker = next(workdir.glob("logs/*/runs/*/failed.json"))
    assert json.loads(marker.read_text())["error"] == out.stderr.strip()


def test_a_job_run_again_in_its_folder_drops_the_failed_marker_of_its_last_attempt(workdir):
    """A sweep run again (resume=auto) after a failure must not list the job as failed once it has run."""
    from elasticface.cli.job_failures import checked_job, failed_jobs

    cfg = train_cli_cfg(workdir / "job")
    (workdir / "job").mkdir()
    (workdir / "job" / "failed.json").write_text(json.dumps({"error": "an earlier attempt's line"}))
    assert failed_jobs(workdir) != []
    assert checked_job("elasticface-train", cfg, TRAIN, lambda c: 1.0) == 1.0
    assert failed_jobs(workdir) == []


@pytest.mark.slow  # two tiny training jobs
def test_in_a_sweep_the_failing_job_says_so_and_the_others_run(workdir):
    out, _ = cli("train.py", "-m", "debug=tiny", "model.backbone.name=iresnet_tiny,iresnet_tiny_typo", cwd=workdir)
    assert out.returncode == 2, out.stderr[-3000:]
    summaries = list(workdir.glob("logs/*/multiruns/*/*/summary.json"))
    failed = list(workdir.glob("logs/*/multiruns/*/*/failed.json"))
    assert len(summaries) == 1 and len(failed) == 1
    assert "iresnet_tiny_typo" in (failed[0].parent / "train.log").read_text()
    assert re.search(r"1 job\(s\) of the sweep in .* failed; the others ran", out.stderr)
    from elasticface.report.sweep import read_sweep

    sweep = read_sweep(summaries[0].parents[1])
    assert [j.problem for j in sweep.unfinished][0].startswith("failed: elasticface-train: error: ")


# -- the rules themselves ------------------------------------------------------------------------------------


def test_every_key_docs_usage_names_has_its_rule():
    """docs/usage.md's keys (`key=...` and its table of keys) each have a rule in cli/config_rules.py, and the table
    says what the rule says."""
    text = (ROOT / "docs" / "usage.md").read_text()
    table = re.findall(r"^\| `([\w.]+)` \| (train|eval|both) \| ([^|]+) \|$", text, re.M)
    assert len(table) >= 60
    for key, who, accepts in table:
        rule = (EVAL if who == "eval" else TRAIN).get(key)
        assert rule is not None, f"docs/usage.md documents {key} for {who}, which has no rule"
        assert accepts.strip() == rule.describe(), key
    assert {k for k, _, _ in table} == set(TRAIN) | set(EVAL)
    typed = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)*)=", text)) - {"key"}
    groups = {p.name for p in (ROOT / "configs").iterdir() if p.is_dir()} | {"head"}
    missing = sorted(k for k in typed if k not in TRAIN and k not in EVAL and k not in groups)
    assert not missing, f"docs/usage.md types keys without a rule: {missing}"


def test_every_default_value_passes_its_own_rule(workdir):
    """The shipped configs break none of the rules (a rule that refuses a default is a defect of the rules)."""
    from elasticface.cli.compose import compose_config, compose_train

    check_keys(compose_config("eval", [], return_hydra_config=True), EVAL)
    for overrides in ([], ["data=folder", "data.root=."], ["data=recordio", "data.root=."]):
        check_keys(compose_train(overrides, workdir), TRAIN, {})
    check_config(compose_train(["debug=tiny"], workdir), TRAIN, {"data": "synthetic"})


# -- model files, told by their first bytes ---------------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["logger=[csv,tensorbord]"], r"^logger=tensorbord: no such option \(did you mean tensorboard\?\); the options: "),
    (["logger=null"], r"^logger=null: a config group takes an option; logger=\[\] or ~logger chooses none$"),
    (["-m", "logger=glob(nothing*)"], r"^logger=glob\(nothing\*\): matches no option; the options: csv, "),
])
def test_a_groups_choice_of_none_several_or_a_glob_is_checked_option_by_option(argv, message, workdir):
    """`logger=[]` (no logger: the compile tests' runs) was refused as "no such option"; a list is checked element
    by element, a glob against the options, and `null`, which Hydra refuses with a traceback, is one line."""
    from elasticface.cli.precheck import precheck
    from elasticface.utils.errors import BadValue

    with pytest.raises(BadValue, match=message):
        precheck("train", argv, TRAIN)


def test_model_files_are_told_by_their_first_bytes(tmp_path):
    state = tmp_path / "backbone.pth"
    torch.save({"w": torch.zeros(2)}, state)
    legacy = tmp_path / "legacy.pth"
    torch.save({"w": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    script = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch")  # ir_version 7, producer_name
    assert model_file_kind(state) == "torch-zip"
    assert model_file_kind(legacy) == "torch-legacy"
    assert model_file_kind(script) == "torchscript"
    assert model_file_kind(Y1) == "mxnet"
    assert model_file_kind(onnx) == "onnx"


@pytest.mark.parametrize("content,found", [
    (b"", "an empty file"),
    (b"hello world\n", "text starting 'hello world"),
    (b"\x89PNG\r\n\x1a\n" + bytes(16), "an image"),
    (b'{"a": 1}', "JSON text"),
    (b"\x00\x01\x02\x03" * 8, "32 bytes starting 00 01 02 03"),
])
def test_anything_else_is_not_a_model_file_naming_the_formats(tmp_path, content, found):
    path = tmp_path / "weights.pth"
    path.write_bytes(content)
    with pytest.raises(BadFile, match=rf"^weights={re.escape(str(path))}: not a model file \({re.escape(found)}"):
        model_file_kind(path)


def test_a_truncated_or_foreign_zip_is_named(tmp_path):
    state = tmp_path / "backbone.pth"
    torch.save({"w": torch.zeros(64)}, state)
    cut = tmp_path / "cut.pth"
    cut.write_bytes(state.read_bytes()[:200])
    with pytest.raises(BadFile, match=r"cut\.pth: a zip archive that cannot be opened .* truncated or corrupt"):
        model_file_kind(cut)
    foreign = tmp_path / "photos.zip"
    with zipfile.ZipFile(foreign, "w") as archive:
        archive.writestr("a.jpg", b"x")
    with pytest.raises(BadFile, match=r"a zip archive without data\.pkl"):
        model_file_kind(foreign)
    with pytest.raises(MissingPath):
        model_file_kind(tmp_path / "nothing.pth")
    assert issubclass(BadFile, UserError) and issubclass(MissingPath, FileNotFoundError)


@pytest.mark.parametrize("argv", [
    ["-m", "head=elastic_arc,elastic_arc_plus", "sigma=0.0125,0.0175,0.025,0.05"],
    ["-m", "hparams_search=paper_table1", "experiment=sweep_demo"],
    ["experiment=released/ms1mv2_r100_elastic_arc", "data.root=faces_emore", "launcher=joblib"],
    ["head=elastic_arc_plus", "sigma=0.0175", "+my.own.key=1", "hydra.run.dir=here"],
    ["logger=[]"], ["logger=[csv,tensorboard]"], ["~logger"], ["-m", "logger=[],[csv]"], ["-m", "logger=glob(*)"],
])
def test_documented_command_lines_pass_the_checks(argv, workdir):
    """What the README and the docs type composes and passes, nested options and sweeps included."""
    from elasticface.cli.precheck import precheck

    (workdir / "faces_emore").mkdir()
    for name in ("train.rec", "train.idx", "lfw.bin"):
        (workdir / "faces_emore" / name).write_bytes(b"\x80\x04")
    assert precheck("train", argv, TRAIN) is not None
