"""Config helpers: resolvers, start-up validation of the top-level keys, flattening for loggers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from elasticface.utils.wandb_mode import wandb_mode


PACKAGE_DIR = Path(__file__).resolve().parents[1]


def config_dir(package_dir: Path = PACKAGE_DIR) -> Path:
    """The Hydra config tree: `<package>/configs` in an installed wheel, else `<checkout>/configs` for
    `src/<package>` (an editable install, or train.py putting src/ on sys.path)."""
    packaged = package_dir / "configs"
    candidates = [packaged]
    if package_dir.parent.name == "src":
        candidates.append(package_dir.parent.parent / "configs")
    for candidate in candidates:
        if (candidate / "train.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        "no Hydra config tree (train.yaml) for the elasticface package at " + " or ".join(map(str, candidates))
        + ": reinstall the package (its wheel ships elasticface/configs) or run from a checkout that has configs/"
    )


def short_dirname(name: str, max_length: int = 120) -> str:
    """A sweep job's directory name: its overrides, cut and suffixed with a hash when they get too long.

    File systems refuse names over 255 bytes, and a sweep with many fixed overrides gets there.
    """
    name = name.replace("/", "_")
    if len(name) <= max_length:
        return name
    return f"{name[: max_length - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def register_resolvers() -> None:
    from elasticface.utils.run_stamp import run_stamp

    for name, fn in (("wandb_mode", wandb_mode), ("short_dirname", short_dirname), ("cwd", os.getcwd),
                     ("run_stamp", run_stamp)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    from elasticface.loggers.run_names import register_run_name_resolvers  # it imports this module

    register_run_name_resolvers()


def _number(cfg: DictConfig, key: str) -> float | None:
    """The value at `key` as a float, or an error that names the key and the value."""
    value = OmegaConf.select(cfg, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key}={value!r}: expected a number")
    return float(value)


def _numbers_only(cfg: DictConfig, node: str) -> None:
    """Every hyperparameter of a `_partial_` factory node (optimizer, scheduler) is a number, bool or list.

    torch's optimizers compare their arguments with numbers deep inside the first step; checked here,
    before any data is read, the error names the key.
    """
    for key, value in (OmegaConf.select(cfg, node) or {}).items():
        if key in ("_target_", "_partial_") or value is None or isinstance(value, (bool, int, float)):
            continue
        items = list(value) if OmegaConf.is_list(value) else [value]
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ValueError(f"{node}.{key}={value!r}: expected a number")


def validate_top_level(cfg: DictConfig) -> None:
    """Fail at start-up, naming the key, before any data is read or model built."""
    _number(cfg, "m")  # each head checks its own range of m
    s, sigma = _number(cfg, "s"), _number(cfg, "sigma")
    if s is not None and not s > 0:
        raise ValueError(f"s={s}: the scale must be > 0")
    if sigma is not None and sigma < 0:
        raise ValueError(f"sigma={sigma}: the margin standard deviation must be >= 0")
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r}: must be an integer >= 0")
    for node in ("optimizer", "scheduler"):
        _numbers_only(cfg, node)
    lr = _number(cfg, "optimizer.lr")
    if lr is not None and not lr > 0:
        raise ValueError(f"optimizer.lr={lr}: must be > 0")


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
