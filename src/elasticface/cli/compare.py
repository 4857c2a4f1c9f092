"""`elasticface-compare A B weights=...`: are the faces in two photos the same person?

    elasticface-compare a.jpg b.jpg weights=model.pth                  # threshold eval.py stored, else none
    elasticface-compare a.jpg b.jpg weights=last.ckpt --threshold 0.28 # a cosine threshold given
    elasticface-compare a.jpg b.jpg weights=model.onnx --set cfp_fp --json

Photos are detected and aligned first unless they are aligned 112x112 faces already. See docs/align.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from elasticface.cli.arguments import add_model_file_arguments, key_value_args
from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument
from elasticface.utils.errors import MissingPath
from elasticface.utils.model_files import model_file_kind


@contract("elasticface-compare")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-compare", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    parser.add_argument("a", help="first photo (any JPEG/PNG, or an aligned 112x112 face)")
    parser.add_argument("b", help="second photo")
    add_model_file_arguments(parser)
    parser.add_argument("--threshold", type=float, help="cosine threshold: 'same' when the cosine is above it "
                                                        "(default: the one eval.py stored for these weights)")
    parser.add_argument("--thresholds", metavar="PATH",
                        help="where eval.py stored thresholds: a run's thresholds.json, its run folder, or a folder "
                             "of runs (default: logs/eval here); the file beside the weights is read as well")
    parser.add_argument("--set", dest="set_name", help="which stored threshold (the .bin set it came from); "
                                                       "default lfw, else the only one stored")
    parser.add_argument("--align", choices=("auto", "always", "never"), default="auto",
                        help="auto: detect and align unless the photo is an aligned 112x112 face")
    parser.add_argument("--flip", action=argparse.BooleanOptionalAction, default=True,
                        help="add the mirror image's embedding (as the threshold was measured)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--weights-dir", help="folder with MTCNN's pnet.pt, rnet.pt, onet.pt")
    parser.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    parser.add_argument("--allow-torchscript", action=argparse.BooleanOptionalAction, default=False,
                        help="open a TorchScript model file (a program: it runs the code it holds)")
    args = parser.parse_args(key_value_args(sys.argv[1:] if argv is None else argv,
                                            flags=("flip", "json", "allow-torchscript")))
    start(parser.prog, [])
    if args.weights is None:
        parser.error("give the model file: weights=<.ckpt | backbone .pth/.pt | TorchScript | .onnx>")
    for photo in (args.a, args.b):  # before torch is imported: a missing photo or a wrong file named in a second
        if not os.path.isfile(photo):
            raise MissingPath(f"{photo}: no such photo; expected an image file (a photo, or an aligned 112x112 face)")
    model_file_kind(args.weights, "weights")
    from elasticface.align.detector import MTCNNDetector
    from elasticface.eval.compare import compare
    from elasticface.eval.embed import load_model_file
    from elasticface.eval.embedding_loop import resolve_device
    from elasticface.eval.thresholds import DEFAULT_SEARCH, stored_threshold

    device = resolve_device(args.device)
    if args.threshold is not None:
        threshold = (args.threshold, "given")
    else:
        if args.thresholds and not os.path.exists(args.thresholds):
            raise MissingPath(f"--thresholds {args.thresholds}: not found; expected an eval run's "
                              "thresholds.json, its run folder or a folder of runs")
        found = stored_threshold(args.weights, args.set_name,
                                 (args.thresholds,) if args.thresholds else (DEFAULT_SEARCH,))
        threshold = (found[0], f"{found[1]}, {found[2]}") if found else None
    model = load_model_file(args.weights, device, args.backbone, args.embedding_size, args.allow_torchscript)
    result = compare(model, args.a, args.b, threshold, args.flip, device, args.align,
                     lambda: MTCNNDetector(device, args.weights_dir))
    print(json.dumps(result.as_dict()) if args.json else result.sentence())
    return 0


if __name__ == "__main__":
    sys.exit(main())
