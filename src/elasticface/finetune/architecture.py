"""The architecture a weights file holds, taken for training: `python train.py weights=<file>` alone builds the
backbone and the embedding size the file fits, as eval.py does. A `backbone=` the user chose (on the command line
or through an experiment) is kept, and a file that does not fit it is the loader's error; `model.embedding_size=`
on the command line is kept the same way."""

from __future__ import annotations

import logging
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import Tensor

from elasticface.backbones.weights import infer_backbone, layout_of, read_state_dict
from elasticface.utils.config import config_dir

log = logging.getLogger(__name__)


def _typed(*keys: str) -> bool:
    """Whether the command line sets one of `keys`."""
    overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    return any(o.lstrip("+~").split("=", 1)[0] in keys for o in overrides)


def _primary_default(group: str) -> str | None:
    """The option configs/train.yaml's defaults list gives `group`."""
    for entry in OmegaConf.load(config_dir() / "train.yaml").get("defaults", []):
        if isinstance(entry, DictConfig) and group in entry:
            return str(entry[group])
    return None


def backbone_chosen(cfg: DictConfig) -> bool:
    """Whether the run's backbone was chosen rather than left at train.yaml's default: `backbone=` or
    `model.backbone.name=` on the command line, or another option than the default (an experiment's). A config
    composed without Hydra's runtime counts as chosen."""
    if not HydraConfig.initialized():
        return True
    if _typed("backbone", "model.backbone", "model.backbone.name", "model.backbone._target_"):
        return True
    return HydraConfig.get().runtime.choices.get("backbone") != _primary_default("backbone")


def fit_to_weights(cfg: DictConfig, path: str) -> tuple[tuple[dict[str, Tensor], str], dict[str, Any]]:
    """Read the state_dict in `path` and set `model.backbone.name` and `model.embedding_size` to what it holds,
    unless chosen (backbone_chosen; `model.embedding_size=` typed). Returns the state (for the loader, so the file
    is read once) and what the run uses: backbone, embedding size and which of them came from the file."""
    state = read_state_dict(path)
    layout = layout_of(state[0])
    inferred: list[str] = []
    with open_dict(cfg):
        if not backbone_chosen(cfg):
            cfg.model.backbone.name = infer_backbone(state[0], path)
            inferred.append("backbone")
        if layout.embedding_size is not None and not _typed("model.embedding_size") \
                and cfg.model.embedding_size != layout.embedding_size:
            cfg.model.embedding_size = layout.embedding_size
            inferred.append("embedding_size")
    name, size = OmegaConf.select(cfg, "model.backbone.name"), cfg.model.embedding_size
    if inferred:
        log.info("%s: %s with a %d-d embedding, read off its tensors (%s); backbone=<option> and "
                 "model.embedding_size=<n> name them instead", path, name, size, layout)
    return state, {"backbone": name, "embedding_size": size, "read_off_the_file": inferred}
