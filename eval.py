"""Evaluate a model file: `python eval.py weights=last.ckpt|backbone.pth|model.onnx data.val_root=/data/faces_emore`.

A thin wrapper: the job is `elasticface.cli.eval.main`, also installed as the `elasticface-eval` command.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # works before `pip install -e .` too

from elasticface.cli.eval import main  # noqa: E402

if __name__ == "__main__":
    main()
