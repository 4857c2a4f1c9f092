"""Evaluate a checkpoint or exported model: `python eval.py ckpt_path=... data.val_root=/data/faces_emore`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # works before `pip install -e .` too

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from elasticface.utils.config import register_resolvers  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="configs", config_name="eval")
def main(cfg: DictConfig) -> None:
    from elasticface.eval.run import run

    run(cfg)


if __name__ == "__main__":
    main()
