"""`elasticface-export --weights last.ckpt --out model.onnx`: write a trained model for use outside this package.

`--weights` takes a Lightning .ckpt or a backbone state_dict, its type detected (`--ckpt` is the same); the
format follows `--out`'s suffix (.onnx, .pth) or `--format`::

    elasticface-export --weights last.ckpt --out model.onnx [--torchscript model.pt]
    elasticface-export --weights last.ckpt --format pth --out backbone.pth
    elasticface-export --weights 295672backbone.pth --backbone iresnet100 --out r100.onnx
    elasticface-export weights=last.ckpt out=model.onnx   # key=value, as in the Hydra jobs

Every export is checked against the PyTorch model on random inputs of two batch sizes (`elasticface.export`).
An output file that exists is refused (exit 2) unless `--overwrite`.
The same command as `python -m elasticface.cli.export`.
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

#: output format by file suffix; other suffixes need --format
FORMAT_BY_SUFFIX = {".onnx": "onnx", ".pth": "pth"}
SUFFIX_BY_FORMAT = {"onnx": ".onnx", "pth": ".pth", "torchscript": ".pt"}


@contract("elasticface-export")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-export", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    add_model_file_arguments(parser)
    parser.add_argument("--out", help="output path (default: the input's name with .onnx, or .pth for --format pth)")
    parser.add_argument("--format", choices=["onnx", "torchscript", "pth"],
                        help="onnx (dynamic batch), torchscript (a trace) or pth (the backbone's state_dict in "
                             "insightface's layout); default: from --out's suffix (.onnx, .pth), else onnx")
    parser.add_argument("--torchscript", help="also write a TorchScript trace here")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--atol", type=float, default=1e-3, help="fail when ONNX and PyTorch differ by more")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=False,
                        help="replace --out (and --torchscript) if it exists (default: refuse)")
    args = parser.parse_args(key_value_args(sys.argv[1:] if argv is None else argv, flags=("check", "overwrite")))
    start(parser.prog, [])
    if args.weights is None:
        parser.error("give the model file: --weights <Lightning .ckpt | backbone state_dict .pth/.pt>")
    model_file_kind(args.weights, "--weights")  # before torch is imported: a wrong file is named in a second
    suffix = os.path.splitext(args.out)[1].lower() if args.out else ""
    fmt = args.format or FORMAT_BY_SUFFIX.get(suffix) or ("onnx" if not args.out else None)
    if fmt is None:
        parser.error(f"--out {args.out}: give --format onnx|torchscript|pth for a '{suffix}' file")
    out = args.out or os.path.splitext(args.weights)[0] + SUFFIX_BY_FORMAT[fmt]
    if os.path.abspath(out) == os.path.abspath(args.weights):
        parser.error(f"--out {out} is the input file; choose another name")
    refuse_existing_files([out, *([args.torchscript] if args.torchscript else [])], args.overwrite)
    from elasticface.export import export_onnx, export_pth, export_torchscript, load_backbone_for_export

    model = load_backbone_for_export(args.weights, args.backbone, args.embedding_size, args.image_size)
    if fmt == "onnx":
        diff = export_onnx(model, out, args.opset, args.check, args.image_size, args.atol)
        print(f"wrote {out} (opset {args.opset}, dynamic batch); max abs diff to PyTorch {diff:.3g}")
    elif fmt == "torchscript":
        diff = export_torchscript(model, out, args.check, args.image_size)
        print(f"wrote {out} (TorchScript trace); max abs diff to PyTorch {diff:.3g}")
    else:
        n = export_pth(model, out)
        print(f"wrote {out} (backbone state_dict, {n} tensors, fp32, insightface key layout)")
    if args.torchscript:
        diff = export_torchscript(model, args.torchscript, args.check, args.image_size)
        print(f"wrote {args.torchscript} (TorchScript trace); max abs diff to PyTorch {diff:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
