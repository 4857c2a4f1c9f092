"""Config helpers: where the config tree is, start-up validation of the top-level keys, flattening for loggers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from elasticface.utils.errors import BadValue

PACKAGE_DIR = Path(__file__).resolve().parents[1]


class ConfigError(BadValue):
    """A config value a command cannot use: the commands print it as one line on stderr, exit status 2
    (cli/preflight.py's one_line_errors)."""


#: when a schedule advances (Lightning's `interval`): `scheduler.interval`, "step" when absent
INTERVALS = ("step", "epoch")


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


def _number(cfg: DictConfig, key: str) -> float | None:
    """The value at `key` as a float, or an error that names the key and the value."""
    value = OmegaConf.select(cfg, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}={value!r}: expected a number")
    return float(value)


def _numbers_only(cfg: DictConfig, node: str) -> None:
    """Every hyperparameter of a `_partial_` factory node (optimizer, scheduler) is a number, bool or list.

    torch's optimizers compare their arguments with numbers deep inside the first step; checked here,
    before any data is read, the error names the key.
    """
    for key, value in (OmegaConf.select(cfg, node) or {}).items():
        if key in ("_target_", "_partial_") or value is None or isinstance(value, (bool, int, float)):
            continue
        if node == "scheduler" and key == "interval":
            if value not in INTERVALS:
                raise ConfigError(f"scheduler.interval={value!r}: expected one of {list(INTERVALS)} (when the "
                                 "schedule advances: after every optimizer step, or after every epoch)")
            continue
        items = list(value) if OmegaConf.is_list(value) else [value]
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ConfigError(f"{node}.{key}={value!r}: expected a number")


def missing_keys(node: Any, prefix: str = "") -> list[str]:
    """The keys still `???` (OmegaConf's mandatory value), without resolving interpolations."""
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    found: list[str] = []
    for key in keys:
        name = f"{prefix}{key}"
        if OmegaConf.is_missing(node, key):
            found.append(name)
        elif not OmegaConf.is_interpolation(node, key) and isinstance(node[key], (DictConfig, ListConfig)):
            found += missing_keys(node[key], name + ".")
    return found


def check_mandatory(cfg: DictConfig) -> None:
    """`???` in a config: cfg.get() would read it as None (Hydra's own node, in a composed config, is not ours)."""
    missing = [key for key in missing_keys(cfg) if not key.startswith("hydra.")]
    if missing:
        raise ConfigError(f"{', '.join(missing)}: this config needs a value; give it on the command line, "
                          f"e.g. {missing[0]}=...")


def validate_top_level(cfg: DictConfig) -> None:
    """Fail at start-up, naming the key, before any data is read or model built."""
    check_mandatory(cfg)
    _number(cfg, "m")  # each head checks its own range of m
    sigma = _number(cfg, "sigma")  # s: elasticface.scale.check_scale
    if sigma is not None and sigma < 0:
        raise ConfigError(f"sigma={sigma}: the margin standard deviation must be >= 0")
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed={seed!r}: must be an integer >= 0")
    for node in ("optimizer", "scheduler"):
        _numbers_only(cfg, node)
    lr = _number(cfg, "optimizer.lr")
    if lr is not None and not lr > 0:
        raise ConfigError(f"optimizer.lr={lr}: must be > 0")


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
