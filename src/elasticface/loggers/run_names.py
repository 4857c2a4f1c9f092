"""What a run is called on the dashboards: its name, its sweep group, its job type and tags.

Registered as config resolvers by the commands (cli/resolvers.py: `${run_name:}`, `${sweep_group:}`,
`${run_job_type:}`, `${run_tags:}`, `${run_tag_values:}`) and used by configs/logger/*.yaml, so a W&B project, an
MLflow experiment or a TensorBoard directory reads "which head, which σ, which backbone, which sweep" without opening
a config.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from elasticface.heads.registry import HEADS
from elasticface.scale import CLASS_COUNT
from elasticface.utils.config import group_choices

PAPER_SCALE = 64.0  # the scale of a head the registry does not know (a config of the user's own)


def group_choice(cfg: DictConfig, group: str) -> str:
    """The chosen option of a config group (head, backbone, data), or a name derived from the config."""
    choice = group_choices().get(group)
    if choice:
        return choice
    if group == "head":
        return str(cfg.model.head.get("name") or cfg.model.head.get("_target_", "head")).rsplit(".", 1)[-1].lower()
    if group == "backbone":
        return str(cfg.model.backbone.get("name", "backbone"))
    return str(cfg.get(group, {}).get("_target_", group)).rsplit(".", 1)[-1]


def run_name(cfg: DictConfig) -> str:
    """`<head>-m<m>[-s<s>][-sigma<σ>]-<backbone>-seed<seed>`.

    E.g. `elastic_arc_plus-m0.5-sigma0.0175-iresnet50-seed42`.

    s appears only when it is a number other than the head's paper default (heads/registry.py), not under
    the default `scale: class_count`; σ only for heads that have
    one. Safe as a directory name (TensorBoard shows the directory as the run's name).
    """
    head = group_choice(cfg, "head")
    parts = [head]
    if cfg.get("m") is not None:
        parts.append(f"m{cfg.m:g}")
    paper_s = HEADS[head].s if head in HEADS else PAPER_SCALE
    if cfg.get("s") not in (None, CLASS_COUNT) and float(cfg.s) != paper_s:  # class_count: the default rule
        parts.append(f"s{cfg.s:g}")
    if cfg.get("sigma") is not None:
        parts.append(f"sigma{cfg.sigma:g}")
    parts += [group_choice(cfg, "backbone"), f"seed{cfg.get('seed')}"]
    return "-".join(str(p).replace("/", "_") for p in parts)


def sweep_group(sweep_dir: str | Path) -> str:
    """The W&B group of every job of the sweep in `sweep_dir`: the directory's name, prefixed with the task
    name in the default layout `<log_dir>/<task_name>/multiruns/<time>`, e.g. `toy_2d/2026-11-22_04-00-00`.

    A function of the path alone, so the sweep report (run later, from anywhere) logs into the same group.
    """
    path = Path(sweep_dir).resolve()
    if path.parent.name == "multiruns" and path.parent.parent.name:
        return f"{path.parent.parent.name}/{path.name}"
    return path.name


def current_sweep_group() -> str | None:
    """The group of the running job when it is part of a Hydra multirun; None for a single run."""
    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return sweep_group(hydra_cfg.sweep.dir)


def run_tags(cfg: DictConfig) -> list[str]:
    """The config's `tags` plus the head, backbone and data options, so runs filter by head in W&B."""
    tags = [str(t) for t in (cfg.get("tags") or [])]
    tags += [group_choice(cfg, "head"), group_choice(cfg, "backbone"), f"data:{group_choice(cfg, 'data')}"]
    return list(dict.fromkeys(tags))


def run_tag_values(cfg: DictConfig) -> dict[str, str]:
    """The same as key-value tags (MLflow's kind): `head`, `backbone`, `data`, and the config's `tags` joined by
    commas under `tags` (one key, so a config tag never overwrites the head's)."""
    values = {group: group_choice(cfg, group) for group in ("head", "backbone", "data")}
    tags = [str(t) for t in (cfg.get("tags") or [])]
    return values | ({"tags": ",".join(tags)} if tags else {})
