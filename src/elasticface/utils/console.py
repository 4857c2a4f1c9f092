"""What a run prints: the config as a tree once (rank 0), and none of Lightning's advertising tips.

The resolved config is saved in `.hydra/config.yaml`; the console gets a compact tree of it, one branch
per config group with the group's chosen option in its label, so a log reads like the command line.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import rank_zero_only

#: top-level keys shown first, in this order; the rest follow as they come
_FIRST = (
    "task_name",
    "m",
    "s",
    "sigma",
    "seed",
    "head",
    "backbone",
    "model",
    "data",
    "optimizer",
    "scheduler",
    "trainer",
)


@rank_zero_only
def print_config_tree(cfg: DictConfig, choices: dict[str, str] | None = None) -> None:
    """Print the resolved config as a rich tree (rank 0 only; plain text when stdout is not a terminal)."""
    from rich import print as rich_print
    from rich.tree import Tree

    choices = choices or {}
    container = OmegaConf.to_container(cfg, resolve=True)
    tree = Tree("config", guide_style="dim")
    if choices:  # head and backbone configs are global packages: only here is the option's name visible
        tree.add("[bold]choices[/bold]: " + "  ".join(f"{k}={v}" for k, v in sorted(choices.items())))
    keys = [k for k in _FIRST if k in container] + [k for k in container if k not in _FIRST]
    for key in keys:
        _add(tree, key, container[key], choices.get(key))
    rich_print(tree)


def _add(parent: Any, key: str, value: Any, choice: str | None = None) -> None:
    label = f"[bold]{key}[/bold]" + (f" [cyan]({choice})[/cyan]" if choice else "")
    if isinstance(value, dict) and value:
        branch = parent.add(label)
        for k, v in value.items():
            _add(branch, str(k), v)
    else:
        parent.add(f"{label}: {value!r}" if not isinstance(value, str) else f"{label}: {value}")


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def quiet_lightning_tips() -> None:
    """Drop Lightning's '💡 Tip: try installing ...' lines, which advertise services, from the logs."""
    logger = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(f, _DropTips) for f in logger.filters):
        logger.addFilter(_DropTips())
