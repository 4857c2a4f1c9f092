"""Matplotlib figures for verification results (Agg backend: no display needed, safe in DDP workers)."""

from __future__ import annotations

import textwrap
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def set_title(ax: plt.Axes, title: str) -> None:
    """The axes' title, wrapped onto more lines where it is wider than the figure (long set names, steps)."""
    fontsize = plt.rcParams["axes.titlesize"]
    points = matplotlib.font_manager.FontProperties(size=fontsize).get_size_in_points()
    # an average glyph of DejaVu Sans is about 0.6 em wide; keep a margin of 10% of the width
    columns = max(10, int(0.9 * ax.figure.get_figwidth() * 72 / (0.6 * points)))
    ax.set_title("\n".join(textwrap.wrap(title, columns)) or title)


def roc_figure(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str = "ROC", log_far: bool = True) -> Figure:
    """ROC curves, one per benchmark: `{name: (fpr, tpr)}`; FAR on a log axis by default."""
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    for name, (fpr, tpr) in curves.items():
        fpr, tpr = np.asarray(fpr), np.asarray(tpr)
        if log_far:
            keep = fpr > 0
            fpr, tpr = fpr[keep], tpr[keep]
        ax.plot(fpr, tpr, label=name, linewidth=1.5)
    if log_far:
        ax.set_xscale("log")
    ax.set_xlabel("false accept rate")
    ax.set_ylabel("true accept rate")
    ax.set_ylim(0.0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    set_title(ax, title)
    if curves:
        ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def score_histogram(genuine: np.ndarray, impostor: np.ndarray, title: str = "scores", bins: int = 60,
                    threshold: float | None = None, xlabel: str = "cosine similarity") -> Figure:
    """Overlaid, density-normalised histograms of genuine and impostor pair scores."""
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    genuine, impostor = np.asarray(genuine, dtype=float), np.asarray(impostor, dtype=float)
    both = np.concatenate([genuine, impostor])
    edges = np.linspace(both.min(), both.max(), bins + 1) if both.size and both.min() < both.max() else bins
    ax.hist(impostor, bins=edges, density=True, alpha=0.55, label=f"impostor ({impostor.size})", color="tab:red")
    ax.hist(genuine, bins=edges, density=True, alpha=0.55, label=f"genuine ({genuine.size})", color="tab:green")
    if threshold is not None:
        ax.axvline(threshold, color="k", linestyle="--", linewidth=1, label=f"threshold {threshold:.3f}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    set_title(ax, title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def value_histogram(values: np.ndarray, title: str, xlabel: str, bins: int = 50) -> Figure:
    """A single histogram (margins, angles) for loggers without native histogram support."""
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=100)
    ax.hist(np.asarray(values, dtype=float).ravel(), bins=bins, color="tab:blue", alpha=0.8)
    ax.set_xlabel(xlabel)
    set_title(ax, title)
    fig.tight_layout()
    return fig


def identification_figure(views: Mapping[str, Mapping[str, object]], title: str = "MegaFace") -> Figure:
    """Identification results side by side, one line per view (`{name: {"rank1": {count: rate}, "cmc": [rates],
    "roc": (fpr, tpr), "impostors": n}}`): rank-1 against the number of distractors, the CMC, and the ROC on a log
    FAR axis with the smallest FAR the impostor pairs can give (1/n) marked."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), dpi=100)
    for name, v in views.items():
        counts = [int(c) for c in v["rank1"]]
        axes[0].plot(counts, [100 * r for r in v["rank1"].values()], marker="o", label=name)
        cmc = list(v.get("cmc") or [])
        axes[1].plot(range(1, len(cmc) + 1), [100 * r for r in cmc], marker="o", label=name)
        if v.get("roc") is not None:
            fpr, tpr = (np.asarray(a) for a in v["roc"])
            keep = fpr > 0
            axes[2].plot(fpr[keep], 100 * tpr[keep], label=name)
    impostors = max((int(v.get("impostors") or 0) for v in views.values()), default=0)
    if impostors:  # no threshold exists below one impostor pair: a TAR read there is at the highest impostor
        axes[2].axvline(1 / impostors, color="grey", linestyle="--", linewidth=1,
                        label=f"1 / {impostors:,} impostor pairs")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("distractors")
    axes[0].set_ylabel("rank-1 identification (%)")
    axes[1].set_xlabel("rank")
    axes[1].set_ylabel("identification rate (%)")
    axes[2].set_xscale("log")
    axes[2].set_xlabel("false accept rate")
    axes[2].set_ylabel("true accept rate (%)")
    for ax, sub in zip(axes, ("rank-1", "CMC", "ROC")):
        ax.grid(True, which="both", alpha=0.3)
        set_title(ax, f"{title}: {sub}")
        if views:
            ax.legend(loc="lower right" if sub != "rank-1" else "lower left")
    fig.tight_layout()
    return fig


def cmc_figure(curves: Mapping[str, Sequence[float]], title: str = "CMC") -> Figure:
    """Identification rate (percent) against rank, one line per curve (`{name: [% at rank 1, 2, ...]}`)."""
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    for name, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), list(curve), marker="o", markersize=3, label=name)
    ax.set_xlabel("rank")
    ax.set_ylabel("identification rate (%)")
    ax.grid(True, which="both", alpha=0.3)
    set_title(ax, title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
