"""Shared fixtures: composed Hydra configs for tiny, fast CPU runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from elasticface.utils.config import register_resolvers

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
register_resolvers()

# Small enough that a full fit (train + verification) takes seconds on 2 CPU cores.
TINY = ["debug=tiny"]


def compose_train(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    """The config `python train.py <overrides>` would run, with the Hydra runtime filled in for tests."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.runtime.cwd = str(ROOT)
            cfg.hydra.job.num = 0
        HydraConfig.instance().set_config(cfg)
    return cfg


@pytest.fixture
def tiny_cfg(tmp_path):
    def make(*overrides: str) -> DictConfig:
        return compose_train(TINY + list(overrides), tmp_path)

    return make


@pytest.fixture(autouse=True)
def _single_thread_when_parallel():
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    yield
