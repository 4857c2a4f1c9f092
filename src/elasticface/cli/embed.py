"""`elasticface-embed --weights last.ckpt --images faces/ --out emb.npy`: embed a folder of aligned faces.

Writes a `.npy` (float32 [N, D]) and beside it a `.txt` index of the relative image paths, one per row::

    elasticface-embed --weights last.ckpt --images faces/ --out emb.npy
    elasticface-embed --weights 295672backbone.pth --backbone iresnet100 --images faces/ --out emb.npy
    elasticface-embed weights=last.ckpt images=faces/ out=emb.npy   # key=value, as in the Hydra jobs
    elasticface-embed --weights last.ckpt --images photos/ --out emb.npy --align   # raw photos: aligned first

``--align`` runs `elasticface-align` on the photos first (faces go to ``--aligned-dir``, by default the output's
name with ``_faces``; rerunning resumes) and embeds those faces; photos without a face are reported, not embedded.

An output that exists (the .npy or its .txt) is refused (exit 2) unless ``--overwrite``; ``--align`` resumes in its
folder as `elasticface-align` does.

``--weights`` takes any model file, its type detected (``--ckpt`` and ``--model`` are the same option).
The same command as `python -m elasticface.cli.embed`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from elasticface.cli.arguments import add_model_file_arguments, key_value_args
from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument
from elasticface.utils.model_files import model_file_kind
from elasticface.utils.output_paths import refuse_existing_files


@contract("elasticface-embed")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-embed", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    add_model_file_arguments(parser)
    parser.add_argument("--images", required=True, help="folder of aligned 112x112 faces (searched recursively)")
    parser.add_argument("--out", required=True, help="output .npy; the index goes to the same name with .txt")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--flip", action=argparse.BooleanOptionalAction, default=True,
                        help="add the flipped image's embedding")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=True,
                        help="L2-normalise the rows")
    parser.add_argument("--resize", action=argparse.BooleanOptionalAction, default=False,
                        help="resize images that are not 112x112")
    parser.add_argument("--align", action=argparse.BooleanOptionalAction, default=False,
                        help="the images are raw photos: detect and align them first")
    parser.add_argument("--aligned-dir", help="where --align writes the faces (default: <out>_faces)")
    parser.add_argument("--max-pixels", type=int, default=None,
                        help="most pixels an image header may declare; larger images are refused before decoding "
                             "(default 4096x4096)")
    parser.add_argument("--allow-torchscript", action=argparse.BooleanOptionalAction, default=False,
                        help="open a TorchScript model file (a program: it runs the code it holds)")
    parser.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=False,
                        help="replace the output .npy and .txt if they exist (default: refuse)")
    args = parser.parse_args(key_value_args(sys.argv[1:] if argv is None else argv,
                                            flags=("flip", "normalize", "resize", "allow-torchscript", "align",
                                                   "overwrite")))
    start(parser.prog, [])
    if args.weights is None:
        parser.error("give the model file: --weights <.ckpt | backbone .pth/.pt | TorchScript | .onnx>")
    model_file_kind(args.weights, "--weights")  # before torch is imported: a wrong file is named in a second
    stem, suffix = os.path.splitext(args.out)
    refuse_existing_files([args.out if suffix == ".npy" else args.out + ".npy", stem + ".txt"], args.overwrite)
    from elasticface.eval.embed import embed_folder, load_model_file  # here, so that --help answers without torch

    images = args.images
    if args.align:
        from elasticface.align.detector import MTCNNDetector
        from elasticface.align.folder import align_folder, format_align_summary
        from elasticface.eval.embedding_loop import resolve_device

        images = args.aligned_dir or os.path.splitext(args.out)[0] + "_faces"
        summary = align_folder(args.images, images, lambda: MTCNNDetector(resolve_device(args.device)),
                               overwrite=args.overwrite)
        print(format_align_summary(summary, images))
    model = load_model_file(args.weights, args.device, args.backbone, args.embedding_size, args.allow_torchscript)
    out, index = embed_folder(model, images, args.out, args.batch_size, args.flip, args.normalize,
                              args.device, args.num_workers, args.resize, args.max_pixels)
    print(f"wrote {out} and {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
