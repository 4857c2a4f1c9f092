"""Fine-tuning's side of the config: the recipe `weights=<file>` selects (before Hydra composes), and every check and
rewrite the parts and the weights file make (before anything is built)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the command line's half (with_recipe) answers --help without importing torch
    from torch import Tensor

#: the option of the `finetune` config group that `weights=<file>` selects (configs/finetune/recipe.yaml)
RECIPE = "recipe"


def with_recipe(overrides: Sequence[str]) -> list[str]:
    """`overrides` with `finetune=recipe` added when they name weights to start from (`weights=<file>`) and choose
    no `finetune` option themselves (`finetune=none` keeps the from-scratch settings). Hydra cannot choose a group
    option by a value, so the command line says it: `--cfg job`, the run's overrides and its config show it."""
    keys = typed_keys(arg for arg in overrides if not arg.startswith("-"))
    weights = [i for i, arg in enumerate(overrides) if arg.startswith("weights=")]
    if "finetune" in keys or not any(overrides[i].split("=", 1)[1].strip() not in ("", "null", "None")
                                     for i in weights):
        return list(overrides)
    after = weights[-1] + 1  # beside it: Hydra's parser takes the overrides as one run of words
    return [*overrides[:after], f"finetune={RECIPE}", *overrides[after:]]


#: the parts of a fine-tune (configs/train.yaml's `finetune:`, finetune/phases.py), each a number >= 0 or a switch
PARTS = ("imprint_centers", "head_only_epochs", "l2sp_alpha", "backbone_lr_scale", "freeze_backbone_bn", "wise_alpha")
#: the parts that act on the loaded weights, so a run without weights= cannot have them, and each one's value when off
NEED_WEIGHTS = {"freeze_backbone_bn": ("keeps the backbone's loaded BatchNorm statistics", False),
                "l2sp_alpha": ("pulls the backbone toward the weights it was loaded from", 0),
                "wise_alpha": ("mixes the weights it was loaded from back into the backbone", 1)}


@dataclass
class StartWeights:
    """`weights=`: the file, its tensors (read once, for the loader too) and what the run takes from it."""

    path: str
    state: tuple[dict[str, "Tensor"], str]
    architecture: dict[str, Any]  # backbone, embedding_size, read_off_the_file


def typed_over_recipe(overrides: Sequence[str], recipe: DictConfig) -> dict[str, tuple[str, Any]]:
    """The recipe's keys that the command line sets too: key -> (the typed value, the recipe's)."""
    from elasticface.utils.config import flatten

    values = {key.replace("/", "."): value for key, value in flatten(OmegaConf.to_container(recipe)).items()}
    typed = {}
    for arg in overrides:
        key, _, value = arg.lstrip("+~").partition("=")
        if key in values:
            typed[key] = (value, values[key])
    return typed


def recipe_overrides() -> list[str] | None:
    """The command line's overrides of a run of the recipe (`finetune=recipe`, what `weights=` selects); None for any
    other run, or outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or HydraConfig.get().runtime.choices.get("finetune") != RECIPE:
        return None
    return list(HydraConfig.get().overrides.task)


def typed_keys(overrides: Iterable[str]) -> set[str]:
    """The keys an override list sets (`+key=`, `~key` and `key=` alike)."""
    return {arg.lstrip("+~").split("=", 1)[0] for arg in overrides}


def say_typed_over_recipe() -> None:
    """One line when keys typed on the command line replace the recipe's values (they win, as any override)."""
    from elasticface.utils.config import config_dir

    overrides = recipe_overrides()
    if overrides is None:
        return
    typed = typed_over_recipe(overrides, OmegaConf.load(config_dir() / "finetune" / f"{RECIPE}.yaml"))
    if typed:
        log.info("finetune=%s: typed %s, in place of the recipe's %s", RECIPE,
                 ", ".join(f"{k}={v[0]}" for k, v in typed.items()),
                 ", ".join(f"{k}={v[1]}" for k, v in typed.items()))


def check_parts(cfg: DictConfig, choice: str | None = None) -> None:
    """Each part of a fine-tune checked once, before anything is built (torch-free: the command line's precheck runs
    it too): a number >= 0, WiSE-FT's share in [0, 1], loaded weights for the parts that need them and for the
    recipe (`choice`: the finetune option), a head-only phase shorter than an epoch-bounded run."""
    from elasticface.finetune.head_only import head_only_steps

    parts = cfg.get("finetune") or {}
    for key in ("head_only_epochs", "backbone_lr_scale", "l2sp_alpha"):
        value = parts.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise BadValue(f"finetune.{key}={value!r}: expected a number >= 0"
                             + (" (0 keeps the backbone's weights fixed)" if key == "backbone_lr_scale" else ""))
    alpha = parts.get("wise_alpha", 1.0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise BadValue(f"finetune.wise_alpha={alpha!r}: expected a number in [0, 1], the fine-tuned weights' share "
                         "of the final backbone (1: as trained, 0: the loaded weights)")
    path = cfg.get("weights")
    if choice == RECIPE and not path:
        raise BadValue(f"finetune={RECIPE} fine-tunes loaded weights, but no weights= names the file "
                       "(weights=<backbone .pth or model-0000.params> selects the recipe itself; from scratch, leave "
                       "finetune= out)")
    for key, (what, off) in NEED_WEIGHTS.items():
        if parts.get(key, off) != off and not path:
            value = str(parts.get(key)).lower() if isinstance(parts.get(key), bool) else parts.get(key)
            raise BadValue(f"finetune.{key}={value} {what}, but no weights= names the file to load (a "
                             "fine-tune: weights=<backbone .pth or model-0000.params>)")
    if OmegaConf.select(cfg, "trainer.max_steps", default=-1) in (None, -1) and cfg.trainer.get("max_epochs"):
        head_only_steps(float(parts.get("head_only_epochs") or 0), 1, int(cfg.trainer.max_epochs), unit="epochs")


def resolve(cfg: DictConfig) -> StartWeights | None:
    """Fine-tuning's side of the config, before anything is built: each part checked (check_parts), and with
    `weights=<file>` the backbone and embedding size the file holds written into the config unless chosen
    (finetune/architecture.py). Returns the file read, or None without weights."""
    from elasticface.finetune.architecture import fit_to_weights

    check_parts(cfg, RECIPE if recipe_overrides() is not None else None)
    path = cfg.get("weights")
    if not path:
        return None
    say_typed_over_recipe()
    state, architecture = fit_to_weights(cfg, str(path))
    return StartWeights(str(path), state, architecture)
