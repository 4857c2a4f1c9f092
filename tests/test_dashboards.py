"""W&B and TensorBoard as dashboards, offline: run names, sweep groups, job types and tags, the max
summary of val/acc_mean, the report table, WANDB_MODE=disabled, and TensorBoard's HPARAMS tab.

W&B offline runs keep config and summary only in their transaction log (`run-<id>.wandb`), so the tests
read that file with a small reader of its documented record format (LevelDB-style log blocks of
protocol-buffer records), independent of the code under test.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import open_dict, read_write

from elasticface.loggers.run_names import run_name, sweep_group
from elasticface.loggers.wandb_logger import FinishWandbRun
from elasticface.loggers.wandb_tables import log_report_table
from elasticface.training import run


def wandb_records(run_dir: Path, timeout: float = 60.0) -> list:
    """Every record of a finished offline run's `run-<id>.wandb` file, parsed.

    wandb-core writes the file asynchronously and may still be writing after `run.finish()` returns,
    so this waits for the run's final "exit" record.
    """
    (path,) = run_dir.glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        records = parse_wandb_log(path.read_bytes())
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def parse_wandb_log(data: bytes) -> list:
    from wandb.proto import wandb_internal_pb2

    block = 32768
    assert data[:4] == b":W&B", "not a W&B transaction log"
    pos, pending, records = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer: padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += block - pos % block
            continue
        if pos + 7 + length > len(data):
            break  # still being written
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def item_key(item) -> str:
    """A history or summary item's key: a plain `key`, or a `nested_key` path for keys with a slash."""
    return item.key or "/".join(item.nested_key)


def offline_run(output_dir: Path) -> tuple[object, dict, dict, list[float], dict]:
    """(run record, config, final summary, history of val/acc_mean, metric definitions) of the one offline run."""
    (run_dir,) = (output_dir / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    run_record = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    summary: dict = {}
    history: list[float] = []
    metrics: dict = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "summary":
            for item in record.summary.update:
                summary[item_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            history += [json.loads(i.value_json) for i in record.history.item if item_key(i) == "val/acc_mean"]
        elif kind == "metric" and record.metric.name:
            metrics[record.metric.name] = record.metric
    return run_record, config, summary, history, metrics


def run_job(cfg) -> dict:
    """What train.py does for one Hydra job: the run, then the job-end callback that finishes the W&B run."""
    summary = run(cfg)
    FinishWandbRun().on_job_end(cfg, JobReturn(status=JobStatus.COMPLETED))
    return summary


def as_multirun_job(cfg, sweep_dir: Path) -> None:
    """Make the composed config look like job 0 of `python train.py -m ...` with its sweep in `sweep_dir`."""
    with read_write(cfg.hydra), open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.sweep.dir = str(sweep_dir)
    HydraConfig.instance().set_config(cfg)


def test_run_names_say_what_the_run_is(tiny_cfg):
    assert run_name(tiny_cfg("head=elastic_arc_plus")) == "elastic_arc_plus-m0.5-sigma0.0175-tiny-seed42"
    assert run_name(tiny_cfg("head=arcface", "backbone=resnet18", "seed=3")) == "arcface-m0.5-resnet18-seed3"
    assert run_name(tiny_cfg("head=cosface", "s=30")) == "cosface-m0.35-s30-tiny-seed42"


def test_sweep_group_is_named_after_the_sweep_directory(tmp_path):
    sweep = tmp_path / "logs" / "casia_r50" / "multiruns" / "2026-01-02_03-04-05"
    assert sweep_group(sweep) == "casia_r50/2026-01-02_03-04-05"
    assert sweep_group(tmp_path / "my_sigma_grid") == "my_sigma_grid"


def test_wandb_offline_run_is_named_grouped_typed_and_keeps_the_best_accuracy(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = tiny_cfg("logger=wandb", "head=elastic_arc_plus", "trainer.max_epochs=3")
    sweep = tmp_path / "logs" / "train" / "multiruns" / "2026-11-22_04-00-00"
    as_multirun_job(cfg, sweep)
    run_job(cfg)
    record, config, summary, history, metrics = offline_run(tmp_path)
    assert record.display_name == "elastic_arc_plus-m0.5-sigma0.0175-tiny-seed42"
    assert record.run_group == "train/2026-11-22_04-00-00"
    assert record.job_type == "elastic_arc_plus"
    assert {"dev", "elastic_arc_plus", "tiny", "data:synthetic"} <= set(record.tags)
    assert (config["m"], config["sigma"], config["choice/head"]) == (0.5, 0.0175, "elastic_arc_plus")
    assert metrics["val/acc_mean"].summary.max and metrics["val/acc_mean"].step_metric == "trainer/global_step"
    assert len(history) == 3
    assert summary["val/acc_mean"] == {"max": max(history)}


def test_single_run_has_no_group(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_job(tiny_cfg("logger=wandb", "trainer.max_steps=1", "trainer.max_epochs=1"))
    record, *_ = offline_run(tmp_path)
    assert record.run_group == "" and record.display_name == "elastic_arc-m0.5-sigma0.05-tiny-seed42"


def test_wandb_disabled_writes_nothing(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = tiny_cfg("logger=wandb", "trainer.max_steps=1", "trainer.max_epochs=1")
    assert cfg.logger.wandb.mode == "disabled"
    summary = run_job(cfg)
    assert summary["global_step"] == 1
    assert not list(tmp_path.rglob("*wandb*")), "W&B wrote files although disabled"


def test_tensorboard_hparams_tab_lists_hyperparameters_against_accuracy(tiny_cfg, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run(tiny_cfg("logger=tensorboard", "head=elastic_arc_plus", "trainer.max_epochs=1"))
    (run_dir,) = (tmp_path / "tensorboard" / "elastic_arc_plus-m0.5-sigma0.0175-tiny-seed42").glob("version_*")
    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    plugin = events.PluginTagToContent("hparams")
    data = {tag: plugin_data_pb2.HParamsPluginData.FromString(content) for tag, content in plugin.items()}
    experiment = data["_hparams_/experiment"].experiment
    assert {m.name.tag for m in experiment.metric_infos} == {"val/acc_mean", "val/acc_mean_best"}
    declared = {h.name for h in experiment.hparam_infos}
    assert {"m", "s", "sigma", "seed", "choice/head", "choice/backbone", "optimizer/lr"} <= declared
    values = data["_hparams_/session_start_info"].session_start_info.hparams
    assert values["sigma"].number_value == 0.0175 and values["choice/head"].string_value == "elastic_arc_plus"
    assert "val/acc_mean" in events.Tags()["scalars"], "the metric the tab reads is logged in the same run"
    assert "hp_metric" not in events.Tags()["scalars"]


def test_report_table_goes_to_the_sweep_group(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    sweep = tmp_path / "logs" / "train" / "multiruns" / "2026-11-22_04-00-00"
    sweep.mkdir(parents=True)
    rows = [{"loss": "ArcFace m=0.5", "lfw": 99.46, "sum": 13},
            {"loss": "Elastic-Arc σ=0.05", "lfw": 99.52, "sum": 17, "winner": True}]
    run_dir = log_report_table(rows, sweep, key="table1")
    assert run_dir is not None and run_dir.parent == sweep / "wandb"
    record = next(r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run")
    assert (record.run_group, record.job_type, record.display_name) == ("train/2026-11-22_04-00-00", "report", "report")
    (table_file,) = (run_dir / "files" / "media" / "table").glob("table1_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["loss", "lfw", "sum", "winner"]
    assert table["data"] == [["ArcFace m=0.5", 99.46, 13, None], ["Elastic-Arc σ=0.05", 99.52, 17, True]]


def test_report_table_disabled_and_bad_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert log_report_table([{"a": 1}], tmp_path) is None
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="not among the columns"):
        log_report_table([{"a": 1, "b": 2}], tmp_path, columns=["a"])
    with pytest.raises(FileNotFoundError, match="no such sweep directory"):
        log_report_table([{"a": 1}], tmp_path / "missing")


@pytest.mark.slow
def test_a_sweep_is_one_wandb_group_with_one_run_per_job(tmp_path):
    """As a user types it, from a fresh working directory: two jobs, two runs, one group named after the sweep."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, TINY

    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "head=arcface,elastic_arc", "logger=many",
           *TINY, "trainer.max_steps=2", "trainer.max_epochs=1"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    records = [offline_run(job)[0] for job in jobs]
    assert {r.run_group for r in records} == {f"train/{sweep.name}"}
    assert len({r.run_id for r in records}) == 2, "each job has its own run"
    assert [r.display_name for r in records] == ["arcface-m0.5-tiny-seed42", "elastic_arc-m0.5-sigma0.05-tiny-seed42"]
    assert [r.job_type for r in records] == ["arcface", "elastic_arc"]
    for job, record in zip(jobs, records):
        assert list((job / "tensorboard" / record.display_name).glob("version_0/events.out.tfevents.*"))
