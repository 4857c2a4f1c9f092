"""What a run prints: the config as a tree on request (rank 0), and no library message a user cannot act on.

The resolved config is saved in `.hydra/config.yaml`; a run prints the few values a researcher checks
(callbacks/run_overview.py) and, with `extras.print_config=full`, a compact tree of the whole config, one branch
per config group with the group's chosen option in its label, so a log reads like the command line.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from lightning_fabric.utilities.warnings import PossibleUserWarning
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import rank_zero_only

from elasticface.utils.config import ConfigError

#: `extras.print_config`: the run's choices in a few lines, those and the whole config tree, or nothing
PRINT_CONFIG = ("short", "full", False)


def print_config_mode(value: object) -> str | None:
    """`extras.print_config` checked: "short", "full" or None (print nothing)."""
    if value is False:
        return None
    if isinstance(value, str) and value in PRINT_CONFIG:
        return value
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    raise ConfigError(f"extras.print_config={shown}: expected short (the run's choices in a few lines), "
                      "full (those and the whole config tree) or false (neither)")

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


class _DropMessage(logging.Filter):
    """Drop a logger's records whose message starts with `start`."""

    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


def _drop(logger_name: str, start: str) -> None:
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, _DropMessage) and f.start == start for f in logger.filters):
        logger.addFilter(_DropMessage(start))


def quiet_lightning_tips() -> None:
    """Drop Lightning's '💡 Tip: try installing ...' lines, which advertise services, from the logs."""
    _drop("pytorch_lightning.utilities.rank_zero", "💡 Tip")


#: torch.utils.cpp_extension's line on import when `nvcc` is on PATH and no GPU is visible (inductor imports it to
#: compile the backbone for the CPU): about CUDA extensions, which a run never builds
NO_CUDA_RUNTIME = "No CUDA runtime is found"
#: Lightning's hint for a job started inside a SLURM allocation without srun (its processes would hang)
SRUN_HINT = "The `srun` command is available on your system but is not used"
FEW_BATCHES = r"The number of training batches \(\d+\) is smaller than the logging interval"


def quiet_resume_noise() -> None:
    """A run that continues from its own checkpoint (resume=auto, ckpt_path=) writes into its checkpoint folder
    again: Lightning's warning that the folder is not empty says what the user asked for."""
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


def quiet_library_noise() -> None:
    """Silence, each at its source, what the libraries print that a user of a run cannot act on (tests/test_logs.py
    fails on any other warning line of `python train.py debug=tiny` and `make train`)."""
    quiet_lightning_tips()
    # Lightning 2.6's own pytree helper builds torch's LeafSpec, which torch 2.14 deprecates: Lightning's to change
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)
    # Lightning looks for SLURM on every run and warns wherever an `srun` is installed (make slurm-up installs one):
    # outside an allocation the hint is wrong; inside one (SLURM_JOB_ID) a job not started by srun may hang, so it stays
    if "SLURM_JOB_ID" not in os.environ:
        warnings.filterwarnings("ignore", message=SRUN_HINT, category=PossibleUserWarning)
    # Lightning compares the logging interval with one epoch's batches, but logs by the global step: a run of short
    # epochs is logged all the same; a run shorter than the interval is said in the run's overview instead
    warnings.filterwarnings("ignore", message=FEW_BATCHES, category=PossibleUserWarning)
    _drop("torch.utils.cpp_extension", NO_CUDA_RUNTIME)
