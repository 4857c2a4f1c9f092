"""What the commands register before Hydra composes: the config resolvers (`${cwd:}`, `${run_name:}`, ...)
and the `head` group's options, one per registry entry (cli/head_group.py).

They live with the commands because the config tree is the commands' input: the library below never
composes a config, so it never needs them.
"""

from __future__ import annotations

import hashlib
import os

from omegaconf import OmegaConf

from elasticface.cli.head_group import register_head_group
from elasticface.cli.help import config_group_options, groups_text, keys_text
from elasticface.cli.plugins import register_plugins

from elasticface.loggers.run_names import current_sweep_group, group_choice, run_name, run_tag_values, run_tags
from elasticface.utils.run_stamp import run_stamp
from elasticface.utils.wandb_mode import wandb_mode


def short_dirname(name: str, max_length: int = 120) -> str:
    """A sweep job's directory name: its overrides, cut and suffixed with a hash when they get too long.

    File systems refuse names over 255 bytes, and a sweep with many fixed overrides gets there.
    """
    name = name.replace("/", "_")
    if len(name) <= max_length:
        return name
    return f"{name[: max_length - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def head_default(name: str, key: str) -> float | None:
    """`${head_default:<head>,<m|s|sigma>}`: a head's paper default, read from the registry (its one home).

    Imported when a config resolves, so that `--help` and `--cfg job` answer without importing torch.
    """
    from elasticface.heads.registry import head_entry

    if key not in ("m", "s", "sigma"):
        raise ValueError(f"head_default:{name},{key}: the key must be one of m, s, sigma")
    return getattr(head_entry(name), key)


def head_scale_default(name: str, rule: str) -> float | str:
    """`${head_scale:<head>,${scale}}`: the head option's s, `class_count` or the head's paper s (elasticface.scale)."""
    from elasticface.scale import head_scale

    return head_scale(head_default(name, "s"), rule)


def register_config_code() -> None:
    """What the config tree needs from code before Hydra composes it: every resolver configs/ uses, the head
    group's options (from the registry) and launcher=slurm's launcher. A second call changes nothing (the head
    group is made again)."""
    register_head_group()
    register_plugins()
    resolvers = {
        "wandb_mode": wandb_mode,
        "short_dirname": short_dirname,
        "cwd": os.getcwd,
        "config_group_options": config_group_options,
        "train_help_groups": groups_text,
        "keys_help": keys_text,
        "head_default": head_default,
        "head_scale": head_scale_default,
        "run_stamp": run_stamp,  # one run directory for all nodes of a multi-node job
        # what a run is called on the dashboards (loggers/run_names.py)
        "run_name": lambda *, _root_: run_name(_root_),
        "sweep_group": lambda: current_sweep_group(),
        "run_job_type": lambda *, _root_: group_choice(_root_, "head"),
        "run_tags": lambda *, _root_: run_tags(_root_),
        "run_tag_values": lambda *, _root_: run_tag_values(_root_),
        # `${if_weights:A,B}`: A when weights= names a file to fine-tune from, B when training from scratch
        "if_weights": lambda with_weights, without, *, _root_: with_weights if _root_.get("weights") else without,
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
