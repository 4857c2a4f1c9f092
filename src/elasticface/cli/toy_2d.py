"""`elasticface-toy-2d [SWEEP_DIR] [--seed N]`: the toy example's summary over seeds, and its heads side by side.

Reads a multirun of `experiment=toy_2d` (default: the newest under ./logs/toy_2d/multiruns), prints per head
the gap criterion, the seeds whose centres merged and mean ± std over seeds, and writes the heads of one seed
side by side as toy_2d_heads.png into the sweep directory. The same command as
`python -m elasticface.cli.toy_2d`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument

TRAIN_A_SWEEP = "python train.py -m experiment=toy_2d head=arcface,elastic_arc,elastic_arc_plus"


@contract("elasticface-toy-2d")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-toy-2d", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("sweep_dir", type=Path, nargs="?", default=None,
                        help="a multirun of experiment=toy_2d (default: the newest under ./logs/toy_2d/multiruns)")
    parser.add_argument("--seed", type=int, default=None, help="the seed drawn in the figure (default: the first)")
    args = parser.parse_args(argv)
    start(parser.prog, [])
    # here, so that --help answers without numpy's and matplotlib's import time
    from elasticface.eval.toy_2d.figures import toy_sweep_figure
    from elasticface.eval.toy_2d.results import SWEEP_FIGURE_FILE, newest_toy_sweep, read_toy_sweep
    from elasticface.eval.toy_2d.summary import format_sweep_summary

    sweep_dir = args.sweep_dir or newest_toy_sweep()
    if sweep_dir is None:
        print(f"{parser.prog}: error: no toy sweep under ./logs/toy_2d/multiruns; name one, or train: {TRAIN_A_SWEEP}",
              file=sys.stderr)
        return 2
    runs = read_toy_sweep(sweep_dir)
    seed = args.seed if args.seed is not None else runs[0]["seed"]
    shown = [r for r in runs if r["seed"] == seed]
    if not shown:
        seeds = sorted({r["seed"] for r in runs})
        print(f"{parser.prog}: error: --seed {seed}: no job of {sweep_dir} has it (seeds: {seeds})", file=sys.stderr)
        return 2
    print(f"sweep: {sweep_dir}")
    print(format_sweep_summary(runs))
    figure = toy_sweep_figure([{**r, "title": f"{r['head']} (seed {seed})"} for r in shown])
    path = Path(sweep_dir) / SWEEP_FIGURE_FILE
    figure.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(figure)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
