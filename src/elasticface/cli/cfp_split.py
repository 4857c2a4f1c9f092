"""`elasticface-cfp-split CFP_DIR FACES OUT`: CFP as an identity-disjoint fine-tuning benchmark by its own
protocol (people of splits 1-5 train; CFP-FP and CFP-FF pairs of splits 6-10 verify), for
`python train.py experiment=cfp_finetune data.root=OUT weights=...`; `--train-photos 2` keeps 2 photos per
training person (one frontal, one profile).

The same command as `python -m elasticface.cli.cfp_split`. The split itself: `elasticface.data.cfp_split`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument


@contract("elasticface-cfp-split")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-cfp-split", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("cfp_dir", help="CFP's dataset folder: Protocol/Split/FP|FF, Data/Images/<id>/...")
    parser.add_argument("faces", help="CFP's photos aligned in Data/Images' layout "
                                      "(elasticface-align cfp-dataset/Data/Images faces/ --fallback)")
    parser.add_argument("out", help="output folder: out/train/<id>/ and out/cfp_fp_splits6_10.bin, "
                                    "out/cfp_ff_splits6_10.bin")
    parser.add_argument("--test-splits", default="6-10", help="the held-out splits (default 6-10), e.g. 10 or 1,3,5")
    parser.add_argument("--train-photos", type=int, default=None,
                        help="at most this many photos per training person: frontal 1, profile 1, frontal 2, ... "
                             "(default: all 14)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into OUT even if it already holds files (default: refuse)")
    args = parser.parse_args(argv)
    start(parser.prog, [])
    from elasticface.data.cfp_split import split_cfp  # here: --help needs no PIL
    from elasticface.data.lfw_split import parse_folds

    try:
        splits = parse_folds(args.test_splits, "--test-splits")
    except ValueError as e:
        parser.error(str(e))
    report = split_cfp(args.cfp_dir, args.faces, args.out, splits, args.train_photos, overwrite=args.overwrite)
    print(" ".join(f"{k}={v}" for k, v in report.items()))
    print(f"train: python train.py experiment=cfp_finetune data.root={args.out} weights=<model file>")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
