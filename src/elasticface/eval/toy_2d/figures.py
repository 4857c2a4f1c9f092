"""The toy example's pictures: the paper's Fig. 2 for one run, and several runs side by side.

matplotlib is imported inside the functions, so that the geometry and the files can be read without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _pyplot() -> Any:
    """pyplot, drawing off-screen (Agg) unless a backend was chosen already (a notebook's stays)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def toy_figure(embeddings: np.ndarray, labels: np.ndarray, centres: np.ndarray, geometry: dict[str, Any],
               title: str = "", ax: Any = None) -> Any:
    """The paper's Fig. 2 picture: normalised embeddings on the unit circle, one colour per identity,
    class centres as rays; low-variation identities as dots, high-variation ones as crosses."""
    plt = _pyplot()
    own_figure = ax is None
    if own_figure:
        figure, ax = plt.subplots(figsize=(4.2, 4.6))
    else:
        figure = ax.figure
    labels = np.asarray(labels)
    unit = np.asarray(embeddings, dtype=np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True).clip(min=1e-12)
    centre_dirs = np.asarray(centres, dtype=np.float64)
    centre_dirs = centre_dirs / np.linalg.norm(centre_dirs, axis=1, keepdims=True).clip(min=1e-12)
    variation = geometry.get("identity_variation")
    high = set(np.flatnonzero(np.asarray(variation) > np.min(variation)).tolist()) if variation else set()
    colours = plt.get_cmap("tab10")
    circle = np.linspace(0, 2 * np.pi, 361)
    ax.plot(np.cos(circle), np.sin(circle), color="0.8", linewidth=0.8, zorder=0)
    # a small radial jitter per class keeps overlapping classes visible, as in the paper's figure
    for k in range(len(centre_dirs)):
        points = unit[labels == k] * (1.0 + 0.015 * (k % 4))
        ax.scatter(points[:, 0], points[:, 1], s=6, alpha=0.5, color=colours(k % 10),
                   marker="x" if k in high else "o", linewidths=0.6)
        ax.plot([0, 1.18 * centre_dirs[k, 0]], [0, 1.18 * centre_dirs[k, 1]], color=colours(k % 10), linewidth=1.2)
        ax.annotate(str(k), 1.28 * centre_dirs[k], ha="center", va="center", fontsize=8)
    ax.set_aspect("equal")
    ax.set_xlim(-1.4, 1.4)
    ax.set_ylim(-1.4, 1.4)
    ax.set_xticks([])
    ax.set_yticks([])
    gaps = geometry["consecutive_gaps_deg"]
    ax.set_xlabel(
        f"centre gaps {min(gaps):.1f}°–{max(gaps):.1f}° (ideal {geometry['ideal_gap_deg']:.0f}°)\n"
        f"mean class std {geometry['mean_class_std_deg']:.2f}°",
        fontsize=8,
    )
    if title:
        ax.set_title(title, fontsize=9)
    if own_figure:
        figure.tight_layout()
    return figure


def toy_sweep_figure(runs: Sequence[dict[str, Any]], columns: int = 3) -> Any:
    """The runs' pictures side by side (the paper's Fig. 2 shows ArcFace, ElasticFace-Arc and -Arc+),
    `columns` to a row; each run's ``title`` (else its head and seed) above its panel."""
    plt = _pyplot()
    columns = max(1, min(columns, len(runs)))
    rows = -(-len(runs) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.0 * columns, 4.8 * rows), squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs):
        title = run.get("title") or f"{run.get('head', '')} seed {run.get('seed', '')}".strip()
        toy_figure(run["embeddings"], run["labels"], run["centres"], run, title=title, ax=ax)
    figure.tight_layout()
    return figure
