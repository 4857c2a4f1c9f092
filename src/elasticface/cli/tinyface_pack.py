"""`elasticface-tinyface-pack FACES OUT`: a TinyFace stand-in in TinyFace's test layout from aligned faces (make them
low resolution first: `elasticface-convert lowres`), people with several photos alternating between the test
(Probe/, Gallery_Match/) and OUT/train/, people with one photo the distractors, for
`python eval.py weights=... tinyface.root=OUT`.

The same command as `python -m elasticface.cli.tinyface_pack`. The rule:
`elasticface.eval.identification.tinyface_stand_in`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument


@contract("elasticface-tinyface-pack")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-tinyface-pack", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("faces", help="aligned faces: <person>/<file> (elasticface-align, then elasticface-convert "
                                      "lowres)")
    parser.add_argument("out", help="the test split: Probe/, Gallery_Match/, Gallery_Distractor/, identities.csv, "
                                    "and train/")
    parser.add_argument("--max-photos", type=int, default=10,
                        help="photos of a test person used, the first by name, alternating gallery and probe "
                             "(default 10)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into OUT even if it already holds files (default: refuse)")
    args = parser.parse_args(argv)
    start(parser.prog, [])
    from elasticface.eval.identification.tinyface_stand_in import build_tinyface_pack

    counts = build_tinyface_pack(args.faces, args.out, args.max_photos, overwrite=args.overwrite)
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    print(f"evaluate: python eval.py weights=<model file> tinyface.root={args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
