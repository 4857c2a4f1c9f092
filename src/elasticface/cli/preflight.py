"""What every command does before its own work: `--version`, a check that the environment can run it, the
quieting of a library's first-run line, and the contract every command keeps with its user's mistakes.

The contract: a mistake of the user's (utils/errors.py's UserError: a path that does not exist, a file that is not
what its key needs, a value out of range, a key that does not exist) ends in ONE line on stderr,
`<command>: error: <what>`, exit status 2, no traceback; `ELASTICFACE_TRACEBACK=1` shows its traceback too. Any other
exception is a defect of the project's and keeps its traceback (exit status 1). A problem found here is one such
line naming what to install: Python or torch older than pyproject.toml states, or a Hydra plugin from an extra
that a chosen option needs (the cluster launchers, the Optuna sweeper).
"""

from __future__ import annotations

import functools
import logging
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from elasticface.cli.version import version_text
from elasticface.utils.errors import BadValue, UserError, one_line, traceback_wanted, user_error_in
from elasticface.utils.requirements import check_environment, require_module

#: config choices that run through a Hydra plugin of the `cluster` extra: (group, option) -> (module, package)
PLUGIN_CHOICES = {
    ("launcher", "slurm"): ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    ("hydra/launcher", "submitit_slurm"): ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    ("hydra/launcher", "submitit_local"): ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    ("launcher", "joblib"): ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    ("hydra/launcher", "joblib"): ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    ("hparams_search", "elastic_optuna"): ("optuna", "optuna"),
    ("hydra/sweeper", "optuna"): ("optuna", "optuna"),
}


#: Hydra's modes by their flags: it runs one at a time and refuses two with a traceback
HYDRA_MODES = {"-m": "-m", "--multirun": "-m", "-c": "--cfg", "--cfg": "--cfg", "-i": "--info", "--info": "--info",
               "-r": "--run", "--run": "--run", "-sc": "--shell-completion", "--shell-completion": "--shell-completion"}


def check_hydra_modes(argv: Sequence[str]) -> None:
    """At most one of Hydra's modes on the command line (`-m ... --cfg job` is the usual pair)."""
    modes = list(dict.fromkeys(HYDRA_MODES[flag] for flag in (a.split("=", 1)[0] for a in argv)
                               if flag in HYDRA_MODES))
    if len(modes) > 1:
        raise BadValue(f"{' and '.join(modes)} together: Hydra takes one of -m, --cfg, --info at a time (a sweep's "
                       "config: the command without -m, with --cfg job)")


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
        check_hydra_modes(argv)
        check_plugins(argv)


def contract(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """A file command's `main` under the contract: a user's mistake anywhere inside is said in one line and `main`
    returns exit status 2 (what its console script exits with)."""
    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return main(*args, **kwargs)
            except Exception as err:
                mistake = user_error_in(err)
                if mistake is None:
                    raise
                say(prog, mistake)
                return 2
        return run
    return wrap


def error_line(prog: str, err: BaseException) -> str:
    return f"{prog}: error: {one_line(err)}"


@contextmanager
def one_line_errors(prog: str) -> Iterator[None]:
    """A user's mistake raised inside as one line on stderr, exit status 2 (with its traceback first when
    `ELASTICFACE_TRACEBACK=1`); anything else passes through with its traceback."""
    try:
        yield
    except Exception as err:
        mistake = user_error_in(err)
        if mistake is None:
            raise
        exit_with(prog, mistake)


def say(prog: str, err: UserError) -> None:
    """The mistake's line on stderr, its traceback first when `ELASTICFACE_TRACEBACK=1` asks for it."""
    if traceback_wanted():
        traceback.print_exception(err)
    print(error_line(prog, err), file=sys.stderr)


def exit_with(prog: str, err: UserError) -> NoReturn:
    """The contract's end of a command: the mistake's line on stderr, exit status 2."""
    say(prog, err)
    raise SystemExit(2) from None
