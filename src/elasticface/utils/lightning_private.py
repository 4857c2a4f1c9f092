"""Every use of Lightning's private API in the package, in one place, read against one version.

Private names move between releases without notice. Each use below is a small function named for what
it does; PRIVATE_NAMES lists each name it touches, and tests/test_lightning_private.py fails, naming the
attribute and this version, when an upgrade moves one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lightning_fabric.utilities.cloud_io import _is_local_file_protocol
from lightning_fabric.utilities.data import _set_sampler_epoch
from lightning_fabric.utilities.logger import _convert_params, _flatten_dict

if TYPE_CHECKING:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint
    from pytorch_lightning.loggers import TensorBoardLogger

# pytorch-lightning and lightning-fabric, the versions constraints.txt pins
CHECKED_AGAINST = "2.6.6"

# (module, object, attribute): attribute None is a module-level name; object "instance:<class>" is an
# attribute set in that class's __init__ (not visible on the class itself)
PRIVATE_NAMES: tuple[tuple[str, str, str | None], ...] = (
    ("lightning_fabric.utilities.cloud_io", "_is_local_file_protocol", None),
    ("lightning_fabric.utilities.data", "_set_sampler_epoch", None),
    ("lightning_fabric.utilities.logger", "_convert_params", None),
    ("lightning_fabric.utilities.logger", "_flatten_dict", None),
    ("pytorch_lightning", "instance:Trainer", "_logger_connector"),
    ("pytorch_lightning.trainer.connectors.logger_connector.logger_connector", "_LoggerConnector",
     "should_update_logs"),
    ("pytorch_lightning.trainer.connectors.logger_connector.logger_connector", "instance:_LoggerConnector",
     "_callback_metrics"),
    ("pytorch_lightning", "instance:LightningModule", "_trainer"),
    ("pytorch_lightning.loops.fit_loop", "instance:_FitLoop", "_combined_loader_states_to_load"),
    ("pytorch_lightning.loops.fit_loop", "instance:_FitLoop", "_combined_loader"),
    ("pytorch_lightning.loops.fit_loop", "instance:_FitLoop", "_data_fetcher"),
    ("pytorch_lightning.loops.fit_loop", "_FitLoop", "_load_combined_loader_states"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_generate_state_key"),
    ("pytorch_lightning.callbacks", "instance:ModelCheckpoint", "_every_n_train_steps"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_should_skip_saving_checkpoint"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_monitor_candidates"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_save_topk_checkpoint"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_save_last_checkpoint"),
    ("pytorch_lightning.loggers", "TensorBoardLogger", "_sanitize_params"),
    ("torch.utils.tensorboard", "SummaryWriter", "_get_file_writer"),  # torch's, reached through the logger
)


def is_local_path(path: str) -> bool:
    """Whether a checkpoint path is on the local file system (not s3://, gs://, memory://, ...)."""
    return _is_local_file_protocol(path)


def should_update_logs(trainer: pl.Trainer) -> bool:
    """Whether the loggers write at this step (every `log_every_n_steps`): costly statistics wait for it."""
    return trainer._logger_connector.should_update_logs


def log_step_metrics(trainer: "pl.Trainer", metrics: Mapping[str, float]) -> None:
    """Write `metrics` to the loggers at this training step, with its epoch, as Lightning writes the step's
    `self.log` values, and into `trainer.callback_metrics` (the progress display and monitors read them), without
    `LightningModule.log`'s bookkeeping per value: about 0.2 ms a value on a CPU (its `_ResultMetric.to` walks the
    metric's module attributes), ten values every logging step."""
    import torch

    connector = trainer._logger_connector
    connector.log_metrics(dict(metrics))
    connector._callback_metrics.update({key: torch.tensor(value) for key, value in metrics.items()})


def attached_trainer(module: pl.LightningModule) -> pl.Trainer | None:
    """The module's trainer, or None outside a fit (the public `module.trainer` raises there)."""
    return module._trainer


def restore_loader_position(trainer: pl.Trainer) -> None:
    """Put the checkpoint's epoch and position back into a training loader that was built before the restore.

    Lightning saves a stateful loader's `state_dict()` and loads it in `FitLoop.setup_data`, but
    `setup_data` returns early once `_combined_loader` exists, and a module whose `configure_optimizers`
    reads `trainer.estimated_stepping_batches` builds the loader (and its iterator, whose sampler order is drawn
    for epoch 0) before the restore. Mid-epoch the position is loaded too; at an epoch's end (the checkpoint of a
    finished fit, which Lightning does not count as restarting) only the epoch: its first epoch after the resume
    would otherwise replay epoch 0's order (the next epoch's iterator is not made again while resuming).
    """
    loop = trainer.fit_loop
    if loop._combined_loader is None or not (loop.restarting or loop.is_resuming):
        return
    for loader in loop._combined_loader.flattened:
        # the sampler's order depends on the epoch: it gets the checkpoint's epoch before the position
        _set_sampler_epoch(loader, loop.epoch_progress.current.processed)
    if loop.restarting and loop._combined_loader_states_to_load:
        loop._load_combined_loader_states()
    iter(loop._data_fetcher)  # the iterator made before the restore started at batch 0 of epoch 0


def checkpoint_state_key(callback: ModelCheckpoint, **kwargs: Any) -> str:
    """ModelCheckpoint's key for its state in a checkpoint, from the given settings."""
    return callback._generate_state_key(**kwargs)


def every_n_train_steps(callback: ModelCheckpoint) -> int:
    return callback._every_n_train_steps


def save_checkpoint_now(callback: ModelCheckpoint, trainer: pl.Trainer) -> None:
    """What ModelCheckpoint does at a save point (top-k file, then last), now, unless this step is saved."""
    if callback._should_skip_saving_checkpoint(trainer):
        return
    candidates = callback._monitor_candidates(trainer)
    callback._save_topk_checkpoint(trainer, candidates)
    callback._save_last_checkpoint(trainer, candidates)


def flat_hyperparameters(logger: TensorBoardLogger, params: Mapping[str, Any] | Any) -> dict[str, Any]:
    """Hyperparameters as the TensorBoard logger writes them: flattened, values it can store."""
    return logger._sanitize_params(_flatten_dict(_convert_params(params)))


def tensorboard_file_writer(logger: TensorBoardLogger) -> Any:
    """The event-file writer under the logger's SummaryWriter (to add a raw summary proto)."""
    return logger.experiment._get_file_writer()


#: where Lightning 2.6's fit loop keeps its optimizer-step counts in a checkpoint (`trainer.global_step` is the first)
_STEP_COUNTERS = (
    ("epoch_loop.automatic_optimization.optim_progress", ("optimizer", "step", "total"), ("ready", "completed")),
    ("epoch_loop.automatic_optimization.optim_progress", ("optimizer", "zero_grad", "total"),
     ("ready", "completed", "started")),
    ("epoch_loop.scheduler_progress", ("total",), ("ready", "completed")),
)


def move_step_counters(checkpoint: dict[str, Any], step: int) -> None:
    """Make a checkpoint resume as optimizer step `step` (global_step, the logging step; the total batch counts in
    proportion): for a resume whose step means another number of images. The epoch and the batch within it stay."""
    fit = checkpoint["loops"]["fit_loop"]
    old = int(checkpoint.get("global_step", 0))
    checkpoint["global_step"] = step
    for key, path, fields in _STEP_COUNTERS:
        node = fit[key]
        for name in path:
            node = node[name]
        for field_name in fields:
            node[field_name] = step
    fit["epoch_loop.state_dict"]["_batches_that_stepped"] = step
    total = fit["epoch_loop.batch_progress"]["total"]
    for field_name in ("ready", "completed", "started", "processed"):
        total[field_name] = int(round(total[field_name] * step / old)) if old else step
