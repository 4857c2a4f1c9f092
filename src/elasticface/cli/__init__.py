"""Command-line entry points: `elasticface-train`, `elasticface-eval` (and `python train.py`/`eval.py`).

The Hydra config tree lives at the top level of the repository (`configs/`) and is shipped inside the
wheel as `elasticface/configs/`; `elasticface.utils.config.config_dir` finds whichever this copy of the
package has, so the commands work from any working directory, installed or not.
"""
