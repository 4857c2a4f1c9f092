"""`elasticface-align SRC OUT`: a folder of photos -> the same layout of 112x112 faces on insightface's template.

    elasticface-align photos/ faces/                        # MTCNN finds the faces; the largest one per photo
    elasticface-align photos/ faces/ --all-faces            # every face: <name>_0.jpg, <name>_1.jpg, ...
    elasticface-align photos/ faces/ --landmarks pts.txt    # landmarks from a file (.txt / .csv / .npy): no detector
    elasticface-align photos/ faces/ --fallback             # a benchmark: every photo kept, even without a face found

Rerunning the same command resumes. OUT may hold other files, but a face is never written over a file that no
earlier run wrote (refused, exit 2) unless `--overwrite`. See docs/align.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument
from elasticface.cli.arguments import key_value_args


@contract("elasticface-align")
def main(argv: Sequence[str] | None = None) -> int:
    from elasticface.align.photos import DEFAULT_MAX_PIXELS

    parser = argparse.ArgumentParser(prog="elasticface-align", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("src", help="folder of JPEG/PNG photos (searched recursively)")
    parser.add_argument("out", help="output folder: the same layout, plus faces.csv and align_report.csv")
    parser.add_argument("--all-faces", action=argparse.BooleanOptionalAction, default=False,
                        help="keep every face, not one per photo")
    parser.add_argument("--pick", choices=("largest", "center"), default="largest",
                        help="the one face kept per photo: the largest box (default) or the one nearest the centre")
    parser.add_argument("--landmarks",
                        help="5-point landmarks per photo (.txt insightface, .csv, .npy); skips detection")
    parser.add_argument("--fallback", action=argparse.BooleanOptionalAction, default=False,
                        help="every photo holds one face (a benchmark set: dropping a photo drops its pairs): where "
                             "none is found, align from the detector's later stages forced on the whole photo, else "
                             "keep the centre crop; each such photo is listed in align_report.csv")
    parser.add_argument("--batch-size", type=int, default=8, help="photos detected together")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--min-face-size", type=int, default=20, help="smallest face searched for, in photo pixels")
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help="photos with more pixels are refused before decoding")
    parser.add_argument("--weights-dir", help="folder with MTCNN's pnet.pt, rnet.pt, onet.pt "
                                              "(default: the installed facenet-pytorch 2.6.0 wheel's)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=False,
                        help="write faces over files in OUT that no earlier run wrote (default: refuse)")
    args = parser.parse_args(key_value_args(sys.argv[1:] if argv is None else argv,
                                            flags=("all-faces", "progress", "fallback", "overwrite")))
    start(parser.prog, [])
    from elasticface.align.detector import MTCNNDetector
    from elasticface.align.folder import align_folder, format_align_summary

    def detector() -> MTCNNDetector:
        import torch

        device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        return MTCNNDetector(device, args.weights_dir, args.min_face_size)

    summary = align_folder(args.src, args.out, detector, args.landmarks, args.all_faces, args.pick,
                           args.batch_size, args.image_size, args.max_pixels, args.progress,
                           fallback=args.fallback, overwrite=args.overwrite)
    print(format_align_summary(summary, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
