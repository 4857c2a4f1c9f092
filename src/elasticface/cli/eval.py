"""`elasticface-eval weights=last.ckpt data.val_root=/data/faces_emore`: evaluate a model file (its type detected).

The same job as `python eval.py` in a checkout and `python -m elasticface.cli.eval`.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from elasticface.cli.config_rules import EVAL
from elasticface.cli.help_answer import answer_help
from elasticface.cli.job_failures import checked_job
from elasticface.cli.precheck import precheck
from elasticface.cli.preflight import one_line_errors, start
from elasticface.cli.resolvers import register_config_code
from elasticface.utils.config import config_dir

PROG = "elasticface-eval"
register_config_code()  # before Hydra composes: resolvers (${cwd:}, ...) and the head group


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="eval")
def job(cfg: DictConfig) -> None:
    def evaluate(cfg: DictConfig) -> None:
        from elasticface.eval.run import evaluate  # here, so that --help and --cfg job answer without importing torch

        evaluate(cfg)

    checked_job(PROG, cfg, EVAL, evaluate)


def main() -> None:
    """`--version` and the environment checks first (Hydra owns `--version` otherwise), `--help` (answered here, in
    a fifth of Hydra's time), then the command line's keys and values, then the job."""
    start(PROG)
    with one_line_errors(PROG):
        answer_help("eval")
        precheck("eval", sys.argv[1:], EVAL)
    job()


if __name__ == "__main__":
    main()
