"""``python -m elasticface.report <sweep dir> [--out DIR]``: print the ranked table; write .md, .csv, .png."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from elasticface.report.plot import plot_accuracy_vs_sigma
from elasticface.report.sweep import read_sweep
from elasticface.report.table import build_report, to_csv, to_markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m elasticface.report", description=__doc__)
    parser.add_argument("sweep_dir", type=Path, help="a multirun directory, e.g. logs/train/multiruns/<time>")
    parser.add_argument(
        "--out", type=Path, default=None, help="where to write report.md/.csv/.png (default: the sweep dir)"
    )
    args = parser.parse_args(argv)
    try:
        report = build_report(read_sweep(args.sweep_dir))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.out or args.sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(report)
    (out / "report.md").write_text(markdown)
    (out / "report.csv").write_text(to_csv(report))
    written = [out / "report.md", out / "report.csv"]
    if report.rows:
        written.append(plot_accuracy_vs_sigma(report, out / "report_acc_vs_sigma.png"))
    print(markdown)
    print("written: " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
