"""Callbacks and loggers built from the config alone (the Lightning-Hydra template's instantiators).

Each node of `callbacks` / `logger` is a `_target_` config or null (left out); anything else is refused,
naming the key, before a model is built.
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig
from pytorch_lightning.callbacks import LearningRateMonitor
from pytorch_lightning.loggers import Logger
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)


def _nodes(group: str, cfg: DictConfig | None) -> list[tuple[str, DictConfig]]:
    nodes = []
    for key, node in (cfg or {}).items():
        if node is None:
            continue
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise BadValue(f"{group}.{key}={node!r}: expected a config with a _target_ (or null to disable it)")
        nodes.append((key, node))
    return nodes


def instantiate_loggers(logger_cfg: DictConfig | None) -> list[Logger]:
    return [instantiate(node) for _, node in _nodes("logger", logger_cfg)]


def instantiate_callbacks(callbacks_cfg: DictConfig | None, has_logger: bool) -> list[pl.Callback]:
    """The configured callbacks; a learning-rate monitor is left out when no logger would receive it."""
    callbacks = []
    for key, node in _nodes("callbacks", callbacks_cfg):
        callback = instantiate(node)
        if isinstance(callback, LearningRateMonitor) and not has_logger:
            log.info(f"callbacks.{key}: no logger to write learning rates to, left out")
            continue
        callbacks.append(callback)
    return callbacks
