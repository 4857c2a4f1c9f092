"""Heads by name, built from their Hydra configs: `configs/head/<name>.yaml` is the one home of each
head's defaults (m, s, σ and the head's own switches), for `python train.py head=<name>` and for code alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from elasticface.utils.config import config_dir

from .base import MarginHead
from .subcenter import SubCenter

_SUBCENTER = "subcenter_"


def _config_path(name: str) -> Path:
    return config_dir() / "head" / f"{name}.yaml"


def head_names() -> list[str]:
    """The options of the `head` config group (`subcenter_<name>` also wraps any other head)."""
    return sorted(p.stem for p in (config_dir() / "head").glob("*.yaml"))


def head_config(name: str, **overrides: Any) -> DictConfig:
    """The resolved `model.head` node of `head=<name>`, with `overrides` applied to the head's arguments."""
    path = _config_path(name)
    if not path.is_file():
        raise ValueError(f"head={name!r}: unknown; valid names are {head_names()} (or subcenter_<name>)")
    cfg = OmegaConf.load(path)
    # m, s and sigma are top-level keys that the head node interpolates; set them there too
    cfg = OmegaConf.merge(cfg, {k: v for k, v in overrides.items() if k in ("m", "s", "sigma") and k in cfg})
    node = OmegaConf.create(OmegaConf.to_container(cfg.model.head, resolve=True))
    if node.get("_target_", "").endswith(".SubCenter"):
        node.k = overrides.pop("k", node.k)
        node.base = OmegaConf.merge(node.base, overrides)
    else:
        node = OmegaConf.merge(node, overrides)
    return node


def build_head(name: str, **overrides: Any) -> MarginHead:
    """The head `head=<name>` builds; `subcenter_<name>` without a config of its own wraps `<name>` (k=3)."""
    if not _config_path(name).is_file() and name.startswith(_SUBCENTER):
        k = overrides.pop("k", 3)
        return SubCenter(build_head(name[len(_SUBCENTER):], **overrides), k=k)
    try:
        return instantiate(head_config(name, **overrides))
    except InstantiationException as err:  # the head's own error (it names the bad value), not Hydra's wrapper
        raise (err.__cause__ or err) from None
