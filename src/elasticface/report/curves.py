"""A sweep's training curves, row by row: where a margin head stalls and softmax does not.

Each finished job's CSV log (`csv/version_*/metrics.csv`, Lightning's CSVLogger; a resumed run's versions are
read in order) gives the training signals the module logs on every logging step: the loss, the angle θ_y to the
sample's own centre (mean and spread), the target logit, the gradient norms reaching the backbone and the
centres, the margin weight λ and the share of rows with θ_y + m > π. Jobs that differ only in their seed are one
row, averaged step by step over the seeds.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from elasticface.report.sweep import Job
from elasticface.report.table import varying_choices
from elasticface.utils.output_paths import atomic_path

SIGNALS = {  # metric -> panel title
    "train/loss": "training loss",
    "train/theta_y_mean_deg": "θ_y, mean (degrees)",
    "train/theta_y_std_deg": "θ_y, std over the batch (degrees)",
    "train/target_logit_mean": "target logit z_y, mean",
    "train/grad_norm_backbone": "gradient norm, backbone",
    "train/grad_norm_centers": "gradient norm, class centres",
    "train/margin_weight": "margin weight λ",
    "train/share_theta_plus_m_over_pi": "share of rows with θ_y + m > π",
}


def read_curves(run_dir: Path) -> dict[str, dict[int, float]]:
    """metric -> {step: value} from a run's CSV logs (later versions overwrite the steps they repeat)."""
    curves: dict[str, dict[int, float]] = defaultdict(dict)
    versions = sorted((run_dir / "csv").glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name[8:]))
    for path in versions:
        with path.open(newline="") as f:
            for record in csv.DictReader(f):
                step = record.get("step")
                for key in SIGNALS:
                    value = record.get(key)
                    if value not in (None, "") and step not in (None, ""):
                        curves[key][int(step)] = float(value)
    return dict(curves)


def row_label(summary: dict[str, Any], varying: list[str]) -> str:
    """The head, then each group choice that varies beyond the head: `arcface, lfw_remedy=margin_warmup`."""
    choices = summary.get("choices") or {}
    extra = [f"{k}={choices.get(k)}" for k in varying]
    return ", ".join([str(summary.get("head"))] + extra)


def curves_by_row(jobs: list[Job]) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """row label -> metric -> (steps, mean over the row's seeds at the steps every seed logged)."""
    finished = [j for j in jobs if j.summary is not None]
    varying = varying_choices(finished)
    rows: dict[str, list[dict[str, dict[int, float]]]] = defaultdict(list)
    for job in finished:
        curves = read_curves(job.path)
        if curves:
            rows[row_label(job.summary, varying)].append(curves)
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for label, runs in rows.items():
        out[label] = {}
        for key in SIGNALS:
            per_seed = [r[key] for r in runs if key in r]
            if not per_seed:
                continue
            steps = sorted(set.intersection(*(set(c) for c in per_seed)))
            if steps:
                out[label][key] = (np.array(steps), np.array([np.mean([c[s] for c in per_seed]) for s in steps]))
    return {label: signals for label, signals in out.items() if signals}


def plot_training_curves(jobs: list[Job], path: Path) -> Path | None:
    """The rows' curves, one panel per signal, as a PNG at `path`; None when no job logged any."""
    rows = curves_by_row(jobs)
    if not rows:
        return None
    from elasticface.report.plot import legend_below, plt  # Agg, set there

    panels = [k for k in SIGNALS if any(k in signals for signals in rows.values())]
    columns = 2
    fig, axes = plt.subplots((len(panels) + columns - 1) // columns, columns, figsize=(11, 2.6 * len(panels) / 2),
                             squeeze=False)
    lines: dict[str, Any] = {}
    for ax, key in zip(axes.flat, panels):
        for label, signals in rows.items():
            if key in signals:
                (line,) = ax.plot(*signals[key], lw=1.2, label=label)
                lines.setdefault(label, line)
                line.set_color(lines[label].get_color())
        ax.set_title(SIGNALS[key], fontsize=10)
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.tick_params(labelsize=8)
        if key in ("train/grad_norm_backbone", "train/grad_norm_centers", "train/loss"):
            ax.set_yscale("log")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    legend_below(fig, list(lines.values()), list(lines), max_columns=3)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
