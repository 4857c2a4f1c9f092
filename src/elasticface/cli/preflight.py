"""What every command does before its own work: `--version`, a check that the environment can run it, and the
quieting of a library's first-run line.

A problem found here is one line on stderr naming what to install (exit status 2), not a traceback minutes
into a run: Python or torch older than pyproject.toml states, or a Hydra plugin from an extra that a chosen
option needs (the cluster launchers, the Optuna sweeper).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from elasticface.cli.version import version_text
from elasticface.utils.config import ConfigError
from elasticface.utils.requirements import MissingRequirement, check_environment, require_module

#: config choices that run through a Hydra plugin of the `cluster` extra: (group, option) -> (module, package)
PLUGIN_CHOICES = {
    ("launcher", "slurm"): ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    ("hydra/launcher", "submitit_slurm"): ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    ("hydra/launcher", "submitit_local"): ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    ("launcher", "joblib"): ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    ("hydra/launcher", "joblib"): ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    ("hparams_search", "elastic_optuna"): ("hydra_plugins.hydra_optuna_sweeper", "hydra-optuna-sweeper"),
    ("hydra/sweeper", "optuna"): ("hydra_plugins.hydra_optuna_sweeper", "hydra-optuna-sweeper"),
}


def check_plugins(overrides: Sequence[str]) -> None:
    """The Hydra plugins the command-line choices need are installed."""
    for arg in overrides:
        if "=" not in arg or arg.startswith("-"):
            continue
        key, value = arg.lstrip("+~").split("=", 1)
        for option in value.split(","):
            plugin = PLUGIN_CHOICES.get((key, option.strip()))
            if plugin:
                require_module(plugin[0], f"{key}={option.strip()}", "cluster", plugin[1])


def start(prog: str, argv: Sequence[str] | None = None) -> None:
    """Answer `--version`, or exit with one line when the environment cannot run `prog` with `argv`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # matplotlib builds its font cache the first time it is imported on a machine and says so at INFO level, before
    # any job starts (Hydra's job callbacks import Lightning, which imports it): not news to the user
    logging.getLogger("matplotlib.font_manager").setLevel(logging.WARNING)
    if "--version" in argv:
        print(version_text(prog))
        raise SystemExit(0)
    with one_line_errors(prog):
        check_environment()
        check_plugins(argv)


@contextmanager
def one_line_errors(prog: str) -> Iterator[None]:
    """A `MissingRequirement` found inside a job (a CUDA build the config asks for) or a `ConfigError` (a value the
    job cannot use) as one line, exit status 2."""
    try:
        yield
    except (MissingRequirement, ConfigError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
