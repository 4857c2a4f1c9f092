"""Accuracy against σ, one panel per benchmark (and their mean), one line per head and m (PNG, Agg)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from elasticface.report.table import FAMILY_NAMES, Report, Row  # noqa: E402


def plot_accuracy_vs_sigma(report: Report, path: str | Path) -> Path:
    """Heads without σ (ArcFace, CosFace) sit at σ = 0, which is what an elastic head with σ = 0 is.
    Error bars are the std over seeds."""
    panels = [*report.benchmarks, "mean"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
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
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
