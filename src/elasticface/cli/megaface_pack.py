"""`elasticface-megaface-pack FACES OUT`: a MegaFace stand-in in insightface's testpack layout from aligned faces
(people with many photos probe, people with one photo distract, the rest go to OUT/train/), for
`python eval.py weights=... megaface.root=OUT`.

The same command as `python -m elasticface.cli.megaface_pack`. The rule: `elasticface.eval.identification.stand_in`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument


@contract("elasticface-megaface-pack")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-megaface-pack", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("faces", help="aligned faces: <person>/<file> (elasticface-align photos/ faces/)")
    parser.add_argument("out", help="the testpack: facescrub_images/, megaface_images/, the lists, and train/")
    parser.add_argument("--min-probe-photos", type=int, default=10, help="photos a probe person has (default 10)")
    parser.add_argument("--max-probe-photos", type=int, default=40,
                        help="photos of a probe person used, the first by name (default 40)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into OUT even if it already holds files (default: refuse)")
    args = parser.parse_args(argv)
    start(parser.prog, [])
    from elasticface.eval.identification.stand_in import build_megaface_pack

    counts = build_megaface_pack(args.faces, args.out, args.min_probe_photos, args.max_probe_photos,
                                 overwrite=args.overwrite)
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    print(f"evaluate: python eval.py weights=<model file> megaface.root={args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
