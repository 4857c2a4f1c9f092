"""`--version` of every command: the package, torch (and the CUDA it was built for), Lightning and Python.

What a bug report needs in one paste. The argparse tools add `VersionAction`; the Hydra jobs (train, eval)
answer `--version` in `preflight.start`, before Hydra, whose own `--version` prints only Hydra's.
Nothing here imports torch until the versions are asked for, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Sequence
from typing import Any


def version_text(prog: str = "elasticface") -> str:
    """The versions, one `name version` per line."""
    import torch

    from elasticface import __version__
    from elasticface.utils.requirements import installed_version

    if torch.version.cuda is None:
        cuda = "CPU-only build (no CUDA)"
    else:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        names = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(gpus)}))
        cuda = f"{torch.version.cuda} build; {gpus} GPU(s) visible" + (f" ({names})" if names else "")
    return "\n".join([
        f"{prog} (elasticface {__version__})",
        f"torch {torch.__version__}",
        f"CUDA {cuda}",
        f"pytorch-lightning {installed_version('pytorch-lightning')}",
        f"Python {platform.python_version()}",
    ])


class VersionAction(argparse.Action):
    """`--version` for an argparse command: print `version_text` and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the package, torch, CUDA, Lightning and Python versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(version_text(parser.prog))  # on stdout, as `--help` (argparse's exit message goes to stderr)
        parser.exit()


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=VersionAction)
