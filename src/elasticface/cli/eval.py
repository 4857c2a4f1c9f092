"""`elasticface-eval weights=last.ckpt data.val_root=/data/faces_emore`: evaluate a model file (its type detected).

The same job as `python eval.py` in a checkout and `python -m elasticface.cli.eval`.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from elasticface.cli.preflight import one_line_errors, start
from elasticface.cli.resolvers import register_config_code
from elasticface.utils.config import config_dir

register_config_code()  # before Hydra composes: resolvers (${cwd:}, ...) and the head group


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="eval")
def job(cfg: DictConfig) -> None:
    from elasticface.eval.run import evaluate  # here, so that --help and --cfg job answer without importing torch

    with one_line_errors("elasticface-eval"):
        evaluate(cfg)


def main() -> None:
    """`--version` and the environment checks first (Hydra owns `--version` otherwise), then the job."""
    start("elasticface-eval")
    job()


if __name__ == "__main__":
    main()
