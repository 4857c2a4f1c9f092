"""The configs the commands run, composed in-process (the command-line checks before Hydra starts, benchmarks and
tests): the same config tree and resolvers, with Hydra's runtime (output_dir, cwd, job number) set as
`@hydra.main` sets it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from elasticface.cli.resolvers import register_config_code
from elasticface.finetune.config import with_recipe
from elasticface.utils.config import config_dir


def compose_config(config_name: str, overrides: Sequence[str], return_hydra_config: bool = False) -> DictConfig:
    """The config `config_name` (train, eval) with `overrides`, as Hydra composes it for the command line."""
    register_config_code()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
            return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)
    finally:
        GlobalHydra.instance().clear()


def compose_train(overrides: list[str], output_dir: Path | str | None = None) -> DictConfig:
    """The training config for `overrides` (with weights=' recipe, as train.py selects it); with `output_dir`,
    Hydra's runtime points there (outputs, checkpoints)."""
    cfg = compose_config("train", with_recipe(overrides), return_hydra_config=True)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.runtime.cwd = str(Path.cwd())
            cfg.hydra.job.num = 0
        HydraConfig.instance().set_config(cfg)
    return cfg
