"""`elasticface-report <sweep dir> [--out DIR]`: print a sweep's ranked table; write .md, .csv, .png.

The same command as `python -m elasticface.cli.report`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument


@contract("elasticface-report")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-report", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("sweep_dir", type=Path, help="a multirun directory, e.g. logs/train/multiruns/<time>")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write report.md/.csv/.png (default: the sweep dir)")
    args = parser.parse_args(argv)
    start(parser.prog, [])
    from elasticface.report.write import write_report  # here, so that --help answers without matplotlib

    markdown, written = write_report(args.sweep_dir, args.out)
    print(markdown)
    print("written: " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
