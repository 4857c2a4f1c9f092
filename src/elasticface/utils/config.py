"""Config helpers: resolvers, start-up validation of the top-level keys, flattening for loggers."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from elasticface.utils.wandb_mode import wandb_mode


def short_dirname(name: str, max_length: int = 120) -> str:
    """A sweep job's directory name: its overrides, cut and suffixed with a hash when they get too long.

    File systems refuse names over 255 bytes, and a sweep with many fixed overrides gets there.
    """
    name = name.replace("/", "_")
    if len(name) <= max_length:
        return name
    return f"{name[: max_length - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def register_resolvers() -> None:
    for name, fn in (("wandb_mode", wandb_mode), ("short_dirname", short_dirname), ("cwd", os.getcwd)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    from elasticface.loggers.run_names import register_run_name_resolvers  # it imports this module

    register_run_name_resolvers()


def validate_top_level(cfg: DictConfig) -> None:
    """Fail at start-up, naming the key, before any data is read or model built."""
    s, sigma, seed = cfg.get("s"), cfg.get("sigma"), cfg.get("seed")
    if s is not None and not float(s) > 0:
        raise ValueError(f"s={s}: the scale must be > 0")
    if sigma is not None and float(sigma) < 0:
        raise ValueError(f"sigma={sigma}: the margin standard deviation must be >= 0")
    if seed is None or int(seed) < 0:
        raise ValueError(f"seed={seed}: must be an integer >= 0")


def group_choices() -> dict[str, str]:
    """Which option of each config group was chosen (head, backbone, data, ...), when run under Hydra."""
    if not HydraConfig.initialized():
        return {}
    choices = HydraConfig.get().runtime.choices
    return {k: str(v) for k, v in choices.items() if v is not None and k != "hydra" and not k.startswith("hydra/")}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}/"))
        return out
    if isinstance(tree, list):
        return {prefix.rstrip("/"): str(tree)}
    return {prefix.rstrip("/"): tree}
