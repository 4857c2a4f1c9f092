"""`elasticface-lfw-split FACES PAIRS OUT`: LFW as a train/test split by its own protocol (people of folds 1-9
train; fold 10's 600 pairs verify), for `python train.py experiment=lfw_fold10 data.root=OUT`; with
`--test-fold 6-10`, people of folds 1-5 train and folds 6-10's 3,000 pairs verify (experiment=lfw_folds6_10).

The same command as `python -m elasticface.cli.lfw_split`. The split itself: `elasticface.data.lfw_split`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument


@contract("elasticface-lfw-split")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-lfw-split", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("faces", help="aligned LFW faces: <Name>/<Name>_0001.jpg (elasticface-align lfw/ faces/)")
    parser.add_argument("pairs", help="LFW's pairs.txt ('10 300' header)")
    parser.add_argument("out", help="output folder: out/train/<Name>/ and out/lfw_fold<k>.bin")
    parser.add_argument("--test-fold", default="10",
                        help="the held-out fold (default 10), or folds: 6-10 (the wide benchmark), 1,3,5")
    parser.add_argument("--train-photos", type=int, default=None,
                        help="each training person's first N photos, people with fewer left out (default: all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into OUT even if it already holds files (default: refuse)")
    args = parser.parse_args(argv)
    start(parser.prog, [])
    from elasticface.data.lfw_split import parse_folds, split_lfw, test_set_name  # here: --help needs no PIL

    try:
        folds = parse_folds(args.test_fold)
    except ValueError as e:
        parser.error(str(e))
    report = split_lfw(args.faces, args.pairs, args.out, test_fold=folds, overwrite=args.overwrite,
                       train_photos=args.train_photos)
    print(" ".join(f"{k}={v}" for k, v in report.items()))
    # the experiment reads <root>/train and <root>/<set>.bin: data.root is the split's folder itself
    experiment = {"lfw_fold10": "lfw_fold10", "lfw_folds6_10": "lfw_folds6_10"}.get(test_set_name(folds))
    if experiment:
        print(f"train: python train.py experiment={experiment} data.root={args.out}")
    else:
        print(f"train: python train.py experiment=lfw_fold10 data.root={args.out} "
              f"data.val_sets.names=[{test_set_name(folds)}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
