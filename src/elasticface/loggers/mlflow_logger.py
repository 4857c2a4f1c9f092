"""MLflow as one of the run's loggers: the project's run names, one experiment per sweep, every hyperparameter, the
metrics, summary.json as an artifact, and a tracking server that cannot be reached costing one line, not the run.

Built on Lightning's public `Logger` and MLflow's public client rather than on Lightning's MLFlowLogger, whose state
is private (utils/lightning_private.py keeps this package's few private uses in one place) and which cannot tell a
store that is down from one that is slow. MLflow 3 refuses its old file store (`./mlruns`) unless
MLFLOW_ALLOW_FILE_STORE=true and defaults to a `mlflow.db` wherever a command runs; so a folder given as the
tracking URI (configs/logger/mlflow.yaml: `logs/mlflow`) becomes a SQLite store there, `mlflow.db` with the
artifacts beside it in `artifacts/`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from argparse import Namespace
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pytorch_lightning.loggers import Logger
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only

from elasticface.utils.config import flatten
from elasticface.utils.requirements import require_module

log = logging.getLogger(__name__)

#: the schemes MLflow's client reads (a tracking server, a database, Databricks, the legacy file store)
SCHEMES = ("http", "https", "sqlite", "databricks", "file")
#: MLflow 3's limits: 6000 characters a parameter value (servers before 1.28 took 500), 250 a key, entries a batch
PARAM_VALUE_LENGTH = 6000
KEY_LENGTH = 250
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
#: Lightning's status words and MLflow's
RUN_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}


def local_store(tracking_uri: str) -> tuple[str, Path | None]:
    """(the URI MLflow's client gets, the folder for the artifacts of a local SQLite store, else None).

    A folder becomes `sqlite:///<folder>/mlflow.db` (created on first use); a `sqlite:///` file keeps its URI and
    gets `artifacts/` beside it (MLflow would put them under `./mlruns` of the working directory); anything else
    (a server, Databricks, a `file:` store) is MLflow's to place.
    """
    scheme = "databricks" if tracking_uri == "databricks" else urlparse(tracking_uri).scheme  # its default profile
    if scheme not in SCHEMES:  # a folder (a Windows drive letter parses as a one-letter scheme)
        folder = Path(tracking_uri).expanduser().resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder / 'mlflow.db'}", folder / "artifacts"
    if tracking_uri.startswith("sqlite:///") and ":memory:" not in tracking_uri:
        database = Path(unquote(tracking_uri[len("sqlite:///"):])).expanduser().resolve()
        database.parent.mkdir(parents=True, exist_ok=True)
        return tracking_uri, database.parent / "artifacts"
    return tracking_uri, None


def param_key(key: str) -> str:
    """A parameter or metric name MLflow accepts: letters, digits, `_ - . / : space`, at most 250 characters
    (Hydra's choices hold `@`: `choice/recipe_head@model.head` becomes `choice/recipe_head_model.head`)."""
    return re.sub(r"[^/\w.\- :]", "_", key)[:KEY_LENGTH]


def param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= PARAM_VALUE_LENGTH else text[:PARAM_VALUE_LENGTH - 3] + "..."


def short_reason(error: BaseException, timeout: float | None = None) -> str:
    """What went wrong, in a few words: a timeout, the innermost OS error (`Connection refused`), or the first
    line of MLflow's message."""
    from requests.exceptions import Timeout

    chain, seen = error, set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if isinstance(chain, Timeout):
            return f"no answer within {timeout:g} s" if timeout else "no answer in time"
        if isinstance(chain, OSError) and chain.strerror:
            return chain.strerror
        chain = chain.__cause__ or chain.__context__
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


@contextlib.contextmanager
def one_quick_try(timeout: float) -> Iterator[None]:
    """MLflow's HTTP calls without their retries (7, with backoff: minutes against a server that is down) and with
    a short timeout, for the probe at start-up."""
    settings = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, round(timeout)))}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class MLflowLogger(Logger):
    """The run in MLflow (configs/logger/mlflow.yaml).

    - `tracking_uri`: a folder (a local SQLite store with its artifacts), or a URI (a tracking server ...).
    - the experiment is `sweep_group` for a job of a multirun (every job of a sweep in one experiment), else
      `experiment_name` (the task: `train`); created when missing.
    - `tags`: MLflow's key-value tags (head, backbone, data, the config's tags), beside MLflow's own (user, source,
      git commit).
    - the store is tried once at start-up (`probe_timeout` seconds, no retries); a store that cannot be reached,
      or that fails later, is ONE warning line and the run goes on without MLflow (its CSV log stays).
    """

    def __init__(self, tracking_uri: str, experiment_name: str = "train", sweep_group: str | None = None,
                 run_name: str | None = None, tags: Mapping[str, Any] | None = None,
                 probe_timeout: float = 5.0) -> None:
        super().__init__()
        require_module("mlflow", "logger=mlflow", "mlflow", "mlflow")
        self.tracking_uri = str(tracking_uri)
        self.experiment_name = sweep_group or experiment_name
        self.run_name = run_name
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.experiment_id: str | None = None
        self.run_id: str | None = None
        self.unavailable: str | None = None  # why MLflow is not used (it could not be reached), else None
        self.client: Any = None
        if rank_zero_only.rank == 0:  # the other ranks log nothing, and never open the store
            self._open(probe_timeout)

    # --- the store, once at start-up

    def _open(self, timeout: float) -> None:
        """MLflow's client, and the experiment found or created with one quick try: where a server that is down
        (or a database that cannot be written) is noticed."""
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        try:
            uri, artifact_root = local_store(self.tracking_uri)
            self.client = MlflowClient(uri)  # a local store's database is created here
            with one_quick_try(timeout):
                found = self.client.get_experiment_by_name(self.experiment_name)
            if found is not None and found.lifecycle_stage != "deleted":
                self.experiment_id = found.experiment_id
                return
            try:
                self.experiment_id = self.client.create_experiment(
                    self.experiment_name, artifact_location=self._artifacts_of_experiment(artifact_root))
            except MlflowException as error:  # another job of the sweep created it in between
                if error.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                self.experiment_id = self.client.get_experiment_by_name(self.experiment_name).experiment_id
        except Exception as error:  # noqa: BLE001  (whatever the store's driver raises: the run goes on)
            self._give_up(error, "could not be reached", timeout)

    def _artifacts_of_experiment(self, artifact_root: Path | None) -> str | None:
        """`<store>/artifacts/<experiment>` for a local store; None: the server's (`--artifacts-destination`)."""
        if artifact_root is None:
            return None
        name = re.sub(r"[^\w.\-/]", "_", self.experiment_name).replace("..", "_").strip("/") or "experiment"
        return (artifact_root / name).as_uri()

    def _give_up(self, error: BaseException, what: str, timeout: float | None = None) -> None:
        self.unavailable = short_reason(error, timeout)
        kind = "server" if urlparse(self.tracking_uri).scheme in ("http", "https") else "store"
        log.warning("MLflow: the tracking %s %s %s (%s); the run goes on without MLflow, with its CSV log",
                    kind, self.tracking_uri, what, self.unavailable)

    @contextlib.contextmanager
    def _or_give_up(self) -> Iterator[None]:
        """A store that fails mid-run (after MLflow's own retries) is one warning; logging stops, training does
        not."""
        try:
            yield
        except Exception as error:  # noqa: BLE001
            self._give_up(error, "failed")

    # --- Lightning's logger interface

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """MLflow's client, with this run created on first use; None when MLflow could not be reached."""
        if self.unavailable is not None or self.client is None:
            return None
        if self.run_id is None:
            from mlflow.tracking.context.registry import resolve_tags
            from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

            tags = self.tags | ({MLFLOW_RUN_NAME: self.run_name} if self.run_name else {})
            with self._or_give_up():
                self.run_id = self.client.create_run(self.experiment_id, tags=resolve_tags(tags)).info.run_id
            if self.run_id is None:
                return None
        return self.client

    @property
    def name(self) -> str:
        return self.experiment_name

    @property
    def version(self) -> str | None:
        return self.run_id

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Every hyperparameter, flattened (`optimizer/lr`), in MLflow's batches and limits."""
        from mlflow.entities import Param

        client = self.experiment
        if client is None:
            return
        flat = flatten(dict(vars(params) if isinstance(params, Namespace) else params))
        batch = list({param_key(k): Param(param_key(k), param_value(v)) for k, v in flat.items()}.values())
        with self._or_give_up():
            for start in range(0, len(batch), PARAMS_PER_BATCH):
                client.log_batch(self.run_id, params=batch[start:start + PARAMS_PER_BATCH])

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        client = self.experiment
        if client is None:
            return
        stamp = int(time.time() * 1000)
        batch = [Metric(param_key(k), float(v), stamp, step or 0) for k, v in metrics.items() if not isinstance(v, str)]
        with self._or_give_up():
            for start in range(0, len(batch), METRICS_PER_BATCH):
                client.log_batch(self.run_id, metrics=batch[start:start + METRICS_PER_BATCH])

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """The run FINISHED (or FAILED); Lightning calls this at the end of fit and again after a validate."""
        if self.unavailable is None and self.client is not None and self.run_id is not None:
            with self._or_give_up():
                self.client.set_terminated(self.run_id, RUN_STATUS.get(status, "FINISHED"))

    # --- what the run leaves behind

    @rank_zero_only
    def log_run_summary(self, summary_file: Path, summary: Mapping[str, Any]) -> None:
        """summary.json as an artifact, and where the best and last checkpoints and the run folder are as tags
        (`best_checkpoint`, `last_checkpoint`, `output_dir`): the files stay where the run wrote them."""
        client = self.experiment
        if client is None:
            return
        with self._or_give_up():
            client.log_artifact(self.run_id, str(summary_file))
            for key in ("best_checkpoint", "last_checkpoint", "output_dir"):
                if summary.get(key):
                    client.set_tag(self.run_id, key, str(summary[key]))
