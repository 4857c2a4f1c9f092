"""What the file tools (embed, export, convert, report) share on their argparse command lines.

`key_value_args` lets them take the `key=value` style of the Hydra jobs as well, so `weights=last.ckpt`
means the same in every command.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping, Sequence

#: the model file's older names, and the Hydra jobs' spelling of shared options
ALIASES = {"batch_size": "batch-size", "num_workers": "num-workers"}


def key_value_args(argv: Sequence[str], flags: Collection[str] = (),
                   aliases: Mapping[str, str] = ALIASES) -> list[str]:
    """`argv` with each `key=value` turned into `--key value` (`key=true|false` into `--key`/`--no-key` for the
    boolean `flags`); `--key value` arguments and positionals pass through unchanged. A value that itself
    holds `=` is given as `--key=value`, which passes through."""
    out = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            out.append(arg)
            continue
        key, value = arg.split("=", 1)
        key = aliases.get(key, key).replace("_", "-")
        if key in flags and value.lower() in ("true", "false"):
            out.append(f"--{key}" if value.lower() == "true" else f"--no-{key}")
        else:
            out += [f"--{key}", value]
    return out


def add_model_file_arguments(parser: argparse.ArgumentParser) -> None:
    """The model-file options embed and export share: one file, its type detected, and its architecture."""
    parser.add_argument("--weights", "--ckpt", "--model", dest="weights",
                        help="model file: Lightning .ckpt, backbone state_dict .pth/.pt (insightface / ElasticFace "
                             "layout, `module.` prefix or not), insightface's MXNet model-0000.params (with "
                             "model-symbol.json beside it), TorchScript or .onnx; --ckpt and --model are the same")
    parser.add_argument("--backbone", help="architecture of a state_dict (iresnet100, mobilefacenet, any timm name); "
                                           "default: inferred from its tensors")
    parser.add_argument("--embedding-size", type=int, help="embedding size of a state_dict (default: the file's)")
