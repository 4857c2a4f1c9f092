"""Command-line entry points: `elasticface-train`, `elasticface-eval` (and `python train.py`/`eval.py`).

The Hydra config tree lives at the top level of the repository (`configs/`) and is shipped inside the
wheel as `elasticface/configs/`; `config_dir` finds whichever this copy of the package has, so the
commands work from any working directory, installed or not.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def config_dir(package_dir: Path = PACKAGE_DIR) -> Path:
    """The config tree: `<package>/configs` in an installed wheel, else `<checkout>/configs` for `src/<package>`."""
    packaged = package_dir / "configs"
    candidates = [packaged]
    if package_dir.parent.name == "src":  # a checkout (editable install, or train.py putting src/ on sys.path)
        candidates.append(package_dir.parent.parent / "configs")
    for candidate in candidates:
        if (candidate / "train.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        "no Hydra config tree (train.yaml) for the elasticface package at " + " or ".join(map(str, candidates))
        + ": reinstall the package (its wheel ships elasticface/configs) or run from a checkout that has configs/"
    )
