"""`python -m gpu_suite [suite options]` runs the suite; `python -m gpu_suite train-path [options]` the path users
run (train_path.py). run.sh puts src/ and benchmarks/ on PYTHONPATH first."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("WANDB_MODE", "offline")
    if argv[:1] == ["train-path"]:
        from gpu_suite import train_path

        train_path.main(argv[1:])
        return
    from gpu_suite import cli

    cli.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
