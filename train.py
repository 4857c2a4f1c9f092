"""Train a face recognition model: `python train.py head=elastic_arc_plus sigma=0.0175`.

A thin wrapper: the job is `elasticface.cli.train.main`, also installed as the `elasticface-train` command.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # works before `pip install -e .` too

from elasticface.cli.train import main  # noqa: E402

if __name__ == "__main__":
    main()
