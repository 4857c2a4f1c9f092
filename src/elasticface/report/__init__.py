"""The paper's parameter-selection table from a sweep directory: ``python -m elasticface.report <dir>``.

Reads only each job's summary.json (``head``, ``m``, ``sigma``, ``seed``, ``val/sets``), ranks the
configurations of each loss family by the Borda count over the benchmarks (on the seed means), and
writes report.md, report.csv and report_acc_vs_sigma.png.
"""

from elasticface.report.borda import borda, max_ranks
from elasticface.report.sweep import Sweep, read_sweep
from elasticface.report.table import Report, build_report, to_csv, to_markdown

__all__ = ["Report", "Sweep", "borda", "build_report", "max_ranks", "read_sweep", "to_csv", "to_markdown"]
