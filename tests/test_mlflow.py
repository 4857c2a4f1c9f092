"""logger=mlflow: runs read back through MLflow's own client from the local store (a SQLite file under logs/mlflow),
from a real tracking server (`mlflow server` on localhost, slow), and a server that cannot be reached (one line,
the run goes on with its CSV log). Nothing here reaches the network beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from elasticface.loggers.mlflow_logger import local_store, param_key
from elasticface.training import run

from conftest import ROOT, TINY, compose_train

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

RUN_NAME = "elastic_arc-m0.5-sigma0.05-tiny-seed42"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def the_run(client: MlflowClient, experiment: str):
    """The one run of `experiment`, with its artifacts' names."""
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r}: {[e.name for e in client.search_experiments()]}"
    (mlflow_run,) = client.search_runs([found.experiment_id])
    return mlflow_run, [a.path for a in client.list_artifacts(mlflow_run.info.run_id)]


def assert_logged_like_the_summary(client: MlflowClient, mlflow_run, artifacts: list[str], summary: dict) -> None:
    """Every hyperparameter, the final val/acc_mean, summary.json and the checkpoints' paths, as summary.json says."""
    params, tags = mlflow_run.data.params, mlflow_run.data.tags
    assert (params["m"], params["sigma"], params["seed"]) == ("0.5", "0.05", str(summary["seed"]))
    assert float(params["optimizer/lr"]) == 0.1 and float(params["s"]) == pytest.approx(summary["s"])
    assert params["choice/head"] == "elastic_arc" and len(params) > 100, "the whole resolved config"
    history = client.get_metric_history(mlflow_run.info.run_id, "val/acc_mean")
    assert history and max(history, key=lambda m: m.step).value == summary["val/acc_mean"]["final"]
    assert mlflow_run.data.metrics["val/acc_mean"] == summary["val/acc_mean"]["final"]
    assert "summary.json" in artifacts
    assert tags["best_checkpoint"] == summary["best_checkpoint"] and Path(tags["best_checkpoint"]).is_file()
    assert tags["last_checkpoint"] == summary["last_checkpoint"]
    assert (tags["head"], tags["backbone"], tags["data"], tags["tags"]) == ("elastic_arc", "tiny", "synthetic", "dev")
    assert mlflow_run.info.run_name == tags["mlflow.runName"] == RUN_NAME
    assert mlflow_run.info.status == "FINISHED"


def test_local_store_holds_the_run_its_hyperparameters_metrics_and_summary(tiny_cfg, tmp_path, monkeypatch):
    """The default: a SQLite store in logs/mlflow of the working directory, its artifacts beside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = tiny_cfg("logger=mlflow", "trainer.max_epochs=1")
    assert list(cfg.logger) == ["csv", "mlflow"], "the CSV log stays beside MLflow"
    summary = run(cfg)
    store = tmp_path / "logs" / "mlflow"
    assert (store / "mlflow.db").is_file() and not (tmp_path / "mlruns").exists()
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    mlflow_run, artifacts = the_run(client, "train")
    assert_logged_like_the_summary(client, mlflow_run, artifacts, summary)
    summary_artifact = client.download_artifacts(mlflow_run.info.run_id, "summary.json", str(tmp_path))
    assert json.loads(Path(summary_artifact).read_text())["val/acc_mean"] == summary["val/acc_mean"]
    assert mlflow_run.info.artifact_uri.startswith((store / "artifacts" / "train").as_uri())
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").is_file()


def test_a_sweep_is_one_experiment_named_after_its_directory(tmp_path, monkeypatch):
    """Two jobs of `python train.py -m seed=1,2` (as Hydra sets them up, in this process): one experiment."""
    from test_dashboards import as_multirun_job

    store = tmp_path / "store"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(store))
    sweep = tmp_path / "logs" / "train" / "multiruns" / "2026-11-22_04-00-00"
    for job, seed in enumerate((1, 2)):
        cfg = compose_train([*TINY, "logger=mlflow", f"seed={seed}", "trainer.max_steps=1", "trainer.max_epochs=1"],
                            sweep / f"{job}_seed={seed}")
        as_multirun_job(cfg, sweep)
        run(cfg)
    client = MlflowClient(local_store(str(store))[0])
    experiment = client.get_experiment_by_name("train/2026-11-22_04-00-00")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.data.params["seed"] for r in runs) == ["1", "2"]
    assert sorted(r.info.run_name for r in runs) == [RUN_NAME.replace("seed42", f"seed{s}") for s in (1, 2)]
    assert client.get_experiment_by_name("train") is None, "no job of the sweep went to the single runs' experiment"


def test_a_server_that_cannot_be_reached_is_one_line_and_the_run_goes_on(tiny_cfg, tmp_path, caplog):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there: refused at once
    cfg = tiny_cfg("logger=mlflow", "trainer.max_epochs=1", f"logger.mlflow.tracking_uri={uri}")
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        summary = run(cfg)
    assert time.monotonic() - started < 240, "MLflow's retries stalled the run"
    said = [r for r in caplog.records if "mlflow" in (r.name + r.getMessage()).lower() and r.levelno >= logging.INFO]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelno == logging.WARNING and said[0].getMessage() == (
        f"MLflow: the tracking server {uri} could not be reached (Connection refused); the run goes on without "
        "MLflow, with its CSV log")
    assert summary["val/acc_mean"]["final"] is not None and (tmp_path / "summary.json").is_file()
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").is_file()


@pytest.mark.parametrize("value", ["htp://host:5000", "s3://bucket/runs", ""])
def test_a_tracking_uri_of_another_scheme_is_one_line_naming_the_key(value):
    from elasticface.cli.config_rules import TRAIN
    from elasticface.utils.errors import BadValue

    with pytest.raises(BadValue, match=r"^logger\.mlflow\.tracking_uri="):
        TRAIN["logger.mlflow.tracking_uri"].check("logger.mlflow.tracking_uri", value)
    for good in ("http://127.0.0.1:5000", "https://mlflow.example.org", "sqlite:///runs/mlflow.db", "databricks",
                 "file:///tmp/mlruns", "logs/mlflow", "/abs/folder", "C:\\runs"):
        TRAIN["logger.mlflow.tracking_uri"].check("logger.mlflow.tracking_uri", good)


def test_parameter_keys_are_ones_mlflow_takes():
    assert param_key("choice/recipe_head@model.head") == "choice/recipe_head_model.head"
    assert param_key("optimizer/lr") == "optimizer/lr"
    assert len(param_key("k" * 400)) == 250


def test_a_folder_is_a_sqlite_store_with_its_artifacts_beside_it(tmp_path):
    assert local_store(str(tmp_path / "runs")) == (f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}",
                                                  tmp_path / "runs" / "artifacts")
    assert (tmp_path / "runs").is_dir(), "SQLite creates the file, not its folder"
    assert local_store(f"sqlite:///{tmp_path / 'db' / 'm.db'}")[1] == tmp_path / "db" / "artifacts"
    for uri in ("http://127.0.0.1:5000", "https://mlflow.example.org", "databricks", "file:///tmp/mlruns"):
        assert local_store(uri) == (uri, None), "MLflow's (or the server's) to place"


# -- a real tracking server ------------------------------------------------------------------------------------


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` on a free localhost port (SQLite, artifacts served over HTTP), once /health answers OK."""
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job workers: a third of the start-up
    env.pop("MLFLOW_TRACKING_URI", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "wb"),
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"mlflow server exited: {(folder / 'server.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                if answer.read().strip() == b"OK":
                    return server, uri
        except OSError:
            time.sleep(0.5)
    stop_server(server)
    raise AssertionError(f"mlflow server did not answer /health: {(folder / 'server.log').read_text()[-3000:]}")


def stop_server(server: subprocess.Popen) -> None:
    """The server and its uvicorn worker (its own process group)."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


@pytest.mark.slow
def test_a_run_on_a_real_tracking_server_reads_back_through_its_client(tmp_path):
    """`mlflow server` (about 15 s to start) and `python train.py ... logger.mlflow.tracking_uri=http://...` as a
    user types it; read back over HTTP, summary.json among the artifacts the server keeps."""
    server_dir, work = tmp_path / "server", tmp_path / "work"
    server_dir.mkdir()
    work.mkdir()
    server, uri = start_server(server_dir)
    try:
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        out = subprocess.run([sys.executable, str(ROOT / "train.py"), *TINY, "logger=mlflow",
                              f"logger.mlflow.tracking_uri={uri}"], cwd=work, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "could not be reached" not in out.stdout + out.stderr
        (summary_file,) = work.glob("logs/train/runs/*/summary.json")
        summary = json.loads(summary_file.read_text())
        client = MlflowClient(tracking_uri=uri)
        mlflow_run, artifacts = the_run(client, "train")
        assert_logged_like_the_summary(client, mlflow_run, artifacts, summary)
        assert mlflow_run.info.artifact_uri.startswith("mlflow-artifacts:"), "uploaded through the server"
        assert list(server_dir.glob("artifacts/**/summary.json"))
        assert not (work / "logs" / "mlflow").exists(), "nothing in the local store"
    finally:
        stop_server(server)


@pytest.mark.slow
def test_an_unreachable_server_as_the_user_sees_it(tmp_path):
    """The command: one line about MLflow, exit status 0, the CSV log written."""
    uri = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), *TINY, "trainer.max_epochs=1", "logger=mlflow",
                          f"logger.mlflow.tracking_uri={uri}"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in (out.stdout + out.stderr).splitlines() if "mlflow" in line.lower()]
    assert len(lines) == 1 and lines[0].endswith(f"MLflow: the tracking server {uri} could not be reached (Connection "
                                                 "refused); the run goes on without MLflow, with its CSV log"), lines
    assert list(tmp_path.glob("logs/train/runs/*/csv/version_0/metrics.csv"))
