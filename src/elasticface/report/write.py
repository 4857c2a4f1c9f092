"""A sweep's report on disk: report.md, report.csv and, when there are rows, report_acc_vs_sigma.png and (when
the runs logged them) report_training.png, the training curves row by row."""

from __future__ import annotations

from pathlib import Path

from elasticface.report.curves import plot_training_curves
from elasticface.report.plot import plot_accuracy_vs_sigma
from elasticface.report.sweep import read_sweep
from elasticface.report.table import build_report, to_csv, to_markdown
from elasticface.utils.output_paths import atomic_write


def write_report(sweep_dir: Path, out: Path | None = None) -> tuple[str, list[Path]]:
    """Rank the sweep in `sweep_dir` and write its files to `out` (default: the sweep dir); returns the
    markdown table and the paths written."""
    sweep = read_sweep(sweep_dir)
    report = build_report(sweep)
    out = out or sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(report)
    atomic_write(out / "report.md", markdown)  # whole or not at all: a rerun replaces them
    atomic_write(out / "report.csv", to_csv(report))
    written = [out / "report.md", out / "report.csv"]
    if report.rows:
        written.append(plot_accuracy_vs_sigma(report, out / "report_acc_vs_sigma.png"))
        curves = plot_training_curves(sweep.finished, out / "report_training.png")
        if curves is not None:
            written.append(curves)
    return markdown, written
