"""What a run is about to do, in six lines before its first step (rank 0): the values a researcher checks.

Printed once training is set up, so every value is the one the run uses: s for this data's classes, the lr after
batch scaling, the devices and precision Lightning chose, whether the backbone was compiled. The whole config is
in the run folder's `.hydra/config.yaml`; `extras.print_config=full` also prints it as a tree at start-up.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.model_summary import get_human_readable_count

from elasticface.utils.config import group_choices
from elasticface.utils.speed import auto_layout, backbone_family

log = logging.getLogger(__name__)


def _yaml(value: Any) -> str:
    """A value as a config or a command line writes it (false, not False)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def head_text(cfg: DictConfig, head: str, s: Any) -> str:
    """`elastic_arc  m=0.5  s=7.486 (class_count)  sigma=0.05`: the head and the values it trains with."""
    parts = [head] + ([f"m={cfg.get('m')}"] if cfg.get("m") is not None else [])
    if isinstance(s, (int, float)):
        parts.append(f"s={s:.4g}" + (f" ({cfg.get('s')})" if isinstance(cfg.get("s"), str) else ""))
    parts += [f"sigma={cfg.get('sigma')}"] if cfg.get("sigma") is not None else []
    schedule = OmegaConf.select(cfg, "model.margin_schedule.kind", default="none")
    parts += [f"margin_schedule={schedule}"] if schedule not in (None, "none") else []
    return "  ".join(parts)


def data_text(name: str, datamodule: Any) -> str:
    """`synthetic: 200 classes, 4000 images; validation synthetic (1000 pairs)`."""
    train_set = getattr(datamodule, "train_set", None)
    text = name + (f": {datamodule.num_classes} classes, {len(train_set)} images" if train_set is not None else "")
    val_sets = getattr(datamodule, "val_sets", None) or {}
    if val_sets:
        text += "; validation " + ", ".join(f"{set_name} ({pairs.num_pairs} pairs)"
                                            for set_name, pairs in val_sets.items())
    return text


def batch_text(per_device: Any, trainer: pl.Trainer) -> str:
    """The global batch, and how it is made when more than one process or accumulation step makes it."""
    world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    if not isinstance(per_device, int):
        return str(per_device)
    parts = [f"{per_device} per process"] + ([f"{world} processes"] if world > 1 else []) \
        + ([f"{accumulate} accumulated"] if accumulate > 1 else [])
    return f"{per_device * world * accumulate}" + (f" ({' x '.join(parts)})" if len(parts) > 1 else "")


def length_text(trainer: pl.Trainer) -> str:
    """`3 epochs = 186 steps`; where `trainer.max_steps` ends the run first, the steps and the share of an epoch
    they are (`5 steps (0.05 of an epoch of 93 steps; trainer.max_steps ends it before 4 epochs)`); the steps
    alone when no epoch count bounds the run. A run shorter than the logging interval says it logs no training
    metrics (Lightning's own warning, silenced, compares one epoch's batches instead)."""
    steps = trainer.estimated_stepping_batches
    epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
    if steps == float("inf"):
        return _epochs(epochs) if epochs else "no limit"
    steps = int(steps)
    batches = trainer.num_training_batches
    per_epoch = math.ceil(batches / trainer.accumulate_grad_batches) if batches not in (0, float("inf")) else None
    if epochs is None or per_epoch is None:
        text = f"{steps} steps"
    elif steps >= per_epoch * epochs:
        text = f"{_epochs(epochs)} = {steps} steps"
    else:
        share = steps / per_epoch
        share_text = f"{share:.2g} of an epoch" if share < 1 else f"{share:.3g} epoch{'s' if share != 1 else ''}"
        text = f"{steps} steps ({share_text} of {per_epoch} steps; trainer.max_steps ends it before {_epochs(epochs)})"
    if steps < trainer.log_every_n_steps:
        text += (f"; fewer than trainer.log_every_n_steps={trainer.log_every_n_steps}: no training metrics logged "
                 "(trainer.log_every_n_steps=1 logs every step)")
    return text


def _epochs(count: int) -> str:
    return f"{count} epoch{'s' if count != 1 else ''}"


def compile_text(setting: Any, compiled: bool, device_type: str, channels_last: bool = False, family: str = "",
                 layout_setting: Any = None) -> str:
    """`auto -> eager NHWC on CPU (AVX512): mobilefacenet, <why>`: the `model.compile` setting, what it came to on
    this accelerator with the layout, and for an `auto` setting the measurement behind the choice."""
    where = f"CPU ({torch.backends.cpu.get_cpu_capability()})" if device_type == "cpu" else device_type.upper()
    layout = " NHWC" if channels_last else ""
    text = f"{_yaml(setting)} -> {'compiled' if compiled else 'eager'}{layout} on {where}"
    if "auto" in (setting, layout_setting):
        text += f" ({family or 'this backbone'}: {auto_layout(family, device_type == 'cpu').why})"
    return text


def run_folder(path: str) -> str:
    """The run folder, relative to the working directory when it lies under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


class RunOverview(pl.Callback):
    """Logs the run's choices once at fit start (`extras.print_config=short` or `full`).

    `names`: the chosen head, backbone, data, optimizer and scheduler options (the job reads them from Hydra).
    """

    def __init__(self, cfg: DictConfig, names: dict[str, str]) -> None:
        self.cfg = cfg
        self.names = names

    def lines(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[str]:
        cfg, names = self.cfg, self.names
        backbone = getattr(pl_module, "backbone", None)
        recipe = group_choices().get("finetune")
        start = [f"starts from {cfg.get('weights')}" + (f", finetune={recipe}" if recipe else "")] \
            if cfg.get("weights") else []
        size = [f"{get_human_readable_count(sum(p.numel() for p in backbone.parameters())).strip()} parameters"] \
            if backbone is not None else []
        device_type = trainer.strategy.root_device.type
        devices = f"{trainer.num_devices} {device_type}" + (f" x {trainer.num_nodes} nodes" if trainer.num_nodes > 1
                                                            else "")
        compiled = compile_text(getattr(pl_module, "compile_setting", False),
                                getattr(pl_module, "compiled_calls", None) is not None, device_type,
                                getattr(pl_module, "channels_last", False), backbone_family(names["backbone"]),
                                getattr(pl_module, "channels_last_setting", None))
        return [
            f"head      {head_text(cfg, names['head'], getattr(getattr(pl_module, 'head', None), 's', None))}",
            f"backbone  {names['backbone']}" + (f" ({', '.join(size + start)})" if size + start else ""),
            f"data      {data_text(names['data'], getattr(trainer, 'datamodule', None))}",
            f"training  batch {batch_text(OmegaConf.select(cfg, 'data.batch_size'), trainer)}  "
            f"lr {OmegaConf.select(cfg, 'optimizer.lr')} ({names['optimizer']}, {names['scheduler']})  "
            f"{length_text(trainer)}",
            f"devices   {devices}  precision {trainer.precision}  compile {compiled}",
            f"folder    {run_folder(str(cfg.paths.output_dir))}  (the whole config: .hydra/config.yaml there; "
            "extras.print_config=full prints it)",
        ]

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            log.info("this run:\n" + "\n".join("  " + line for line in self.lines(trainer, pl_module)))
