"""Accuracy against σ, one panel per benchmark (and their mean), one line per head and m (PNG, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from elasticface.report.table import FAMILY_NAMES, Report, Row  # noqa: E402
from elasticface.utils.output_paths import atomic_path  # noqa: E402

PANEL_WIDTH_IN = 3.6
PANEL_HEIGHT_IN = 3.4


def accuracy_vs_sigma_figure(report: Report) -> Figure:
    """Heads without σ (ArcFace, CosFace) sit at σ = 0, which is what an elastic head with σ = 0 is.
    Error bars are the std over seeds. The legend sits under the panels in as many columns as fit."""
    panels = [*report.benchmarks, "mean"]
    fig, axes = plt.subplots(1, len(panels), figsize=(PANEL_WIDTH_IN * len(panels), PANEL_HEIGHT_IN), squeeze=False)
    lines: dict[tuple, list[Row]] = {}
    for r in report.rows:
        lines.setdefault((r.family, r.m, *(str(r.extra[k]) for k in report.varying)), []).append(r)
    for ax, bench in zip(axes[0], panels):
        for (family, m, *extra), rows in lines.items():
            rows = sorted(rows, key=lambda r: r.sigma or 0.0)
            x = [r.sigma or 0.0 for r in rows]
            if bench == "mean":
                y = [100 * r.acc_mean for r in rows]
                err = [100 * (r.acc_spread or 0.0) for r in rows]
            else:
                y = [100 * r.mean(bench) for r in rows]
                err = [100 * r.std(bench) for r in rows]
            label = " ".join([FAMILY_NAMES.get(family, family), *([f"m={m:g}"] if m is not None else []), *extra])
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
        ax.set_title(bench)
        ax.set_xlabel("σ")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("verification accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_below(fig, handles, labels)
    return fig


def legend_below(fig: Figure, handles: list[Any], labels: list[str], max_columns: int = 6) -> None:
    """A figure legend under the panels: the most columns (up to `max_columns`) whose rows fit the figure's
    width, measured with the renderer (long labels take fewer columns); the figure grows to hold it."""
    renderer = fig.canvas.get_renderer()
    legend = None
    for columns in range(max(1, min(len(labels), max_columns)), 0, -1):
        if legend is not None:
            legend.remove()
        legend = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=columns,
                            fontsize="small", frameon=False)
        if legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            break
    # the figure grows by the legend's height, so many rows of entries do not squash the panels
    legend_height_in = legend.get_window_extent(renderer).height / fig.dpi + 0.1
    width_in, height_in = fig.get_size_inches()
    fig.set_size_inches(width_in, height_in + legend_height_in)
    fig.tight_layout(rect=(0, legend_height_in / (height_in + legend_height_in), 1, 1))


def plot_accuracy_vs_sigma(report: Report, path: str | Path) -> Path:
    """Write :func:`accuracy_vs_sigma_figure` as a PNG at `path`."""
    fig = accuracy_vs_sigma_figure(report)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path
