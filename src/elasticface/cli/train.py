"""`elasticface-train head=elastic_arc_plus sigma=0.0175`: train a face recognition model.

The same job as `python train.py` in a checkout and `python -m elasticface.cli.train`; the Hydra job is
named after this module ("train"), so its log file is `train.log` whichever way it was started.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from elasticface.cli.config_rules import TRAIN
from elasticface.cli.help import answer_group_help
from elasticface.cli.help_answer import answer_help
from elasticface.cli.job_failures import checked_job
from elasticface.cli.precheck import precheck
from elasticface.cli.preflight import one_line_errors, start
from elasticface.cli.resolvers import register_config_code
from elasticface.finetune.config import check_parts, with_recipe
from elasticface.sweeps.halving import check_command_line
from elasticface.utils.config import config_dir

PROG = "elasticface-train"
register_config_code()  # before Hydra composes: resolvers (${cwd:}, ${wandb_mode:}, ...) and the head group


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")
def job(cfg: DictConfig) -> float | None:
    def train(cfg: DictConfig) -> float | None:
        from elasticface.training import run  # here, so that --help and --cfg job answer without importing torch

        return run(cfg)["val/acc_mean"]["best"]  # the value an hparams_search sweeper maximises

    return checked_job(PROG, cfg, TRAIN, train, failed=float("nan"))


def main() -> None:
    """`--version`, the environment checks and `--help <group>` first (Hydra owns `--version` otherwise, and reads
    a group name as a broken override), `--help` (answered here, in a fifth of Hydra's time), then the command
    line's keys and values and the fine-tune's parts, then the job; `weights=<file>` selects the fine-tuning recipe."""
    start(PROG)
    answer_group_help(PROG)
    sys.argv[1:] = with_recipe(sys.argv[1:])
    with one_line_errors(PROG):
        answer_help("train")
        cfg = precheck("train", sys.argv[1:], TRAIN)
        if cfg is not None:
            check_parts(cfg, cfg.hydra.runtime.choices.get("finetune"))
            multirun = bool({"-m", "--multirun"} & set(sys.argv[1:])) or str(cfg.hydra.mode).endswith("MULTIRUN")
            check_command_line(cfg, [a for a in sys.argv[1:] if not a.startswith("-")], multirun)
    job()


if __name__ == "__main__":
    main()
