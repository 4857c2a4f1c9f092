"""The toy example's files: what one run writes into its directory, and the runs of a sweep read back.

A run (callbacks/toy_2d.py) writes toy_2d.json (its geometry), the embeddings, labels and centres as .npy and
its picture; `elasticface-toy-2d` and the toy notebook read every job of a multirun and write the heads side by
side into the sweep directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from elasticface.eval.toy_2d.figures import toy_figure
from elasticface.eval.toy_2d.summary import job_measures
from elasticface.utils.errors import MissingPath

RESULT_FILE = "toy_2d.json"
ARRAY_FILES = {"embeddings": "toy_2d_embeddings.npy", "labels": "toy_2d_labels.npy", "centres": "toy_2d_centres.npy"}
FIGURE_FILE = "toy_2d.png"
SWEEP_FIGURE_FILE = "toy_2d_heads.png"


def write_toy_results(output_dir: Path, embeddings: np.ndarray, labels: np.ndarray, centres: np.ndarray,
                      geometry: dict[str, Any], title: str = "") -> Path:
    """toy_2d.json, the arrays as .npy and the picture (toy_2d.png) in ``output_dir``; returns the JSON path."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for key, array in (("embeddings", embeddings), ("labels", labels), ("centres", centres)):
        np.save(output_dir / ARRAY_FILES[key], np.asarray(array))
    path = output_dir / RESULT_FILE
    path.write_text(json.dumps({"title": title, **geometry}, indent=2))
    figure = toy_figure(embeddings, labels, centres, geometry, title)
    figure.savefig(output_dir / FIGURE_FILE, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path


def read_toy_results(run_dir: Path) -> dict[str, Any]:
    """What :func:`write_toy_results` wrote in one run directory: the JSON's keys plus the three arrays."""
    run_dir = Path(run_dir)
    path = run_dir / RESULT_FILE
    if not path.is_file():
        raise MissingPath(f"{path}: no toy example results (train with experiment=toy_2d)")
    result = json.loads(path.read_text())
    result.update({key: np.load(run_dir / name) for key, name in ARRAY_FILES.items()})
    result["run_dir"] = str(run_dir)
    return result


def _job_order(job: Path) -> tuple[float, str]:
    """Hydra's job number first (``10_...`` after ``9_...``), then the name."""
    number = job.name.split("_", 1)[0]
    return (int(number) if number.isdigit() else float("inf"), job.name)


def read_toy_sweep(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job of a multirun that wrote toy results, with its head, seed and steps (from summary.json) and
    its row of the summary (:func:`~elasticface.eval.toy_2d.summary.job_measures`)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise MissingPath(f"{sweep_dir}: no such sweep directory")
    runs = []
    for job in sorted((p.parent for p in sweep_dir.glob(f"*/{RESULT_FILE}")), key=_job_order):
        result = read_toy_results(job)
        summary_path = job / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        result.update(head=summary.get("head", job.name), seed=summary.get("seed"), steps=summary.get("global_step"),
                      train_seconds=summary.get("train_seconds"))
        result.update(job_measures(result))
        runs.append(result)
    if not runs:
        raise MissingPath(
            f"{sweep_dir}: no job wrote {RESULT_FILE} (train with python train.py -m experiment=toy_2d ...)"
        )
    return runs


def newest_toy_sweep(bases: Sequence[Path] | None = None) -> Path | None:
    """The newest multirun under ``<base>/logs/toy_2d/multiruns`` that holds toy results (bases: the working
    directory, as it is when called)."""
    for base in bases or (Path.cwd(),):
        sweeps = sorted(p for p in (Path(base) / "logs" / "toy_2d" / "multiruns").glob("*")
                        if any(p.glob(f"*/{RESULT_FILE}")))
        if sweeps:
            return sweeps[-1]
    return None
