"""Train a face recognition model: `python train.py head=elastic_arc_plus sigma=0.0175`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # works before `pip install -e .` too

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from elasticface.utils.config import register_resolvers  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from elasticface.training import run

    summary = run(cfg)
    return summary["val/acc_mean"]["best"]  # the value an hparams_search sweeper maximises


if __name__ == "__main__":
    main()
