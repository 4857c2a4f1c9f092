"""The suite's command line: what to measure (parse), and the parts in order (main). Issue 39's measurements in one
call on a lent GPU: the template's training step against insightface's arcface_torch on the same GPU, the share of
the chip used, peak memory, the speed settings on and off, and the input pipeline (docs/speed.md, "GPU suite").

    bash benchmarks/gpu_suite/run.sh --arcface-torch /path/to/insightface/recognition/arcface_torch
    bash benchmarks/gpu_suite/run.sh --device cpu --backbones tiny --batches 8 ...   (tiny sizes: the test suite)

Rows: iresnet50 and iresnet100 at 128 and 256 images per GPU, with the full class layer at 85,742 classes and
with `model=partial_fc` (rate 0.1) at 2,000,000 classes. Each row times the template's step
(template.py: train.py's module and Trainer with trainer=gpu's defaults: bf16 autocast, heads and centres in
fp32, torch.compile and channels_last by `auto`) and arcface_torch's
(arcface.py: its train_v2.py step, imported from --arcface-torch), and prints images/s, model FLOP
utilisation (FLOPs of one forward + backward from torch.utils.flop_counter over the device's dense bf16 peak),
peak memory and the ratios template / arcface_torch. Then each speed setting on and off at one size (with each
side's losses at steps 0 and 1: a setting keeps the result when they agree within the precision's rounding),
and the input pipeline (pipeline.py) against the fastest model row. A row that cannot be measured (a
wrong --arcface-torch, no bf16 on the device, CUDA out of memory) gets one line saying why; the others run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import tempfile
import time
from pathlib import Path

from gpu_suite.printing import goals, header, print_profiles, say
from gpu_suite import switches
from gpu_suite.rows import SETTINGS, speed_layers, speed_rows, step_rows, switch_rows

NEEDED = {"hydra": "hydra-core", "omegaconf": "omegaconf", "pytorch_lightning": "pytorch-lightning", "timm": "timm",
          "torchdata": "torchdata", "torchmetrics": "torchmetrics", "torchvision": "torchvision",
          "elasticface": "elasticface (PYTHONPATH=src)"}


def missing_packages() -> list[str]:
    missing = []
    for module, package in NEEDED.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    return missing


def csv_list(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--arcface-torch", metavar="DIR", default=None,
                   help="insightface checkout (or its recognition/arcface_torch folder); its rows are skipped without")
    p.add_argument("--backbones", type=csv_list(str), default=["iresnet50", "iresnet100"])
    p.add_argument("--batches", type=csv_list(int), default=[128, 256], help="images per GPU")
    p.add_argument("--full-classes", type=int, default=85_742, help="classes of the full class layer (model=default)")
    p.add_argument("--pfc-classes", type=int, default=2_000_000, help="classes of model=partial_fc (0: no such rows)")
    p.add_argument("--pfc-rate", type=float, default=0.1)
    p.add_argument("--layers", type=csv_list(str), default=["full", "pfc"],
                   help="the rows' class layers, in this order: full, pfc (default full,pfc)")
    p.add_argument("--compile-backend", default=None,
                   help="the template's torch.compile backend (default: inductor, where trainer=gpu compiles; on a "
                   "CPU the rows run eagerly unless one is named: aot_eager and eager trace and count the compiled "
                   "calls without generating code)")
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="keep each measurement's folder (job.json, result.json, log.txt) under DIR")
    p.add_argument("--head", default="arcface", help="the template's head (arcface_torch runs ArcFace m=0.5, s=64)")
    p.add_argument("--precision", default=None, help="the template's trainer.precision (default: bf16-mixed on "
                   "cuda, 32-true on cpu); arcface_torch uses its own (fp16 autocast + GradScaler on cuda)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default 15 on cuda, 5 on cpu: each row starts in a fresh process, where "
                   "compilation, cuDNN's autotuning and the allocator's first blocks all fall in the first steps)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--parts", type=csv_list(str), default=["steps", "speed", "pipeline"],
                   help="which parts: steps, speed, pipeline, profile (torch.profiler at the speed size), switches "
                   "(what makes a second run faster, switches.py); the last two not default")
    p.add_argument("--profile-steps", type=int, default=5,
                   help="steps the profile records, in the row's own fit after its timed steps")
    p.add_argument("--no-stacks", dest="stacks", action="store_false",
                   help="leave out the profile's second pass with Python stacks (where the host waits; a fit more)")
    p.add_argument("--second-run", action="store_true",
                   help="a profiled row runs again in its process after its profile (issue 71: faster the second time)")
    p.add_argument("--switches", type=csv_list(str), default=None,
                   help="the switches part's switches, in this order (default: all but the costly: "
                   f"{', '.join(switches.DEFAULT)}; all: {', '.join(switches.NAMES)})")
    p.add_argument("--seconds", type=float, default=None,
                   help="the switches part starts no process it has not time for in this many seconds")
    p.add_argument("--speed-backbone", default=None,
                   help="the speed settings' and profiles' backbone (default: the last of --backbones)")
    p.add_argument("--speed-batch", type=int, default=None,
                   help="the speed settings' and profiles' batch (default: the largest)")
    p.add_argument("--speed-layers", type=csv_list(str), default=["full"],
                   help="the class layers the speed settings run at: full, pfc (default: full)")
    p.add_argument("--settings", type=csv_list(str), default=None,
                   help=f"which speed settings (default: all): {', '.join(name for name, _, _ in SETTINGS)}")
    p.add_argument("--pipeline-images", type=int, default=None,
                   help="images in the RecordIO (default 8192; 256 on cpu)")
    p.add_argument("--workers", type=int, default=None, help="CPU loader workers (default: every core)")
    p.add_argument("--passes", type=int, default=3, help="timed passes over the RecordIO")
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak, if not in the table")
    p.add_argument("--json", metavar="FILE", default=None, help="also write every figure to FILE")
    args = p.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device visible to torch (use --device cpu for the tiny smoke run)")
    unknown = set(args.parts) - {"steps", "speed", "pipeline", "profile", "switches"}
    if unknown:
        p.error(f"--parts {','.join(sorted(unknown))}: expected some of steps, speed, pipeline, profile, switches")
    args.switches = args.switches or list(switches.DEFAULT)
    if set(args.switches) - set(switches.NAMES):
        p.error(f"--switches {','.join(sorted(set(args.switches) - set(switches.NAMES)))}: expected some of "
                f"{', '.join(switches.NAMES)}")
    if set(args.layers) - {"full", "pfc"} or len(set(args.layers)) != len(args.layers):
        p.error(f"--layers {','.join(args.layers)}: expected full, pfc or both, each once")
    if set(args.speed_layers) - {"full", "pfc"} or ("pfc" in args.speed_layers and not args.pfc_classes):
        p.error(f"--speed-layers {','.join(args.speed_layers)}: expected some of full, pfc (pfc needs --pfc-classes)")
    names = [name for name, _, _ in SETTINGS]
    if args.settings is not None and set(args.settings) - set(names):
        p.error(f"--settings {','.join(sorted(set(args.settings) - set(names)))}: expected some of {', '.join(names)}")
    args.settings = args.settings or names
    args.precision = args.precision or ("bf16-mixed" if args.device == "cuda" else "32-true")
    args.warmup = args.warmup if args.warmup is not None else (15 if args.device == "cuda" else 5)
    args.speed_backbone = args.speed_backbone or args.backbones[-1]
    args.speed_batch = args.speed_batch or max(args.batches)
    args.pipeline_images = args.pipeline_images or (8192 if args.device == "cuda" else 256)
    return args


def bf16_problem(device: str, precision: str, name: str) -> str | None:
    """Why the template's rows cannot run at `precision` here, or None."""
    import torch

    if "bf16" not in precision:
        return None
    if device == "cuda":
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch: no emulation argument
            native = torch.cuda.is_bf16_supported()
        if not native:
            return (f"template rows skipped: {name} has no native bf16 (trainer.precision={precision} would be "
                    "emulated); rerun with --precision 16-mixed")
        return None
    from elasticface.utils.speed import cpu_has_bf16

    if not cpu_has_bf16():
        return (f"template rows skipped: this CPU has no bf16 instructions (trainer.precision={precision} would be "
                "emulated); rerun with --precision 32-true")
    return None


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    missing = missing_packages()
    if missing:
        say(f"gpu_suite: missing Python packages: {', '.join(missing)} (on a lent GPU, carry them as wheels: "
            "docs/speed.md, GPU suite)")
        raise SystemExit(2)
    os.environ.setdefault("WANDB_MODE", "offline")
    import torch

    from elasticface.utils.console import quiet_library_noise
    from gpu_suite.measure import bf16_peak

    quiet_library_noise()
    started = time.perf_counter()
    info = header(args)
    peak = bf16_peak(info["device"], args.peak_tflops) if args.device == "cuda" else None
    lines: list[str] = []
    template_problem = bf16_problem(args.device, args.precision, info["device"])
    if template_problem:
        lines.append(template_problem)
        say(template_problem)
    at = None
    if "steps" in args.parts or "profile" in args.parts:
        if args.arcface_torch is None:
            say("arcface_torch: not given (--arcface-torch DIR): its columns and the ratios read n/a")
        else:
            try:
                from gpu_suite import arcface

                at = arcface.load(args.arcface_torch)
                say(f"arcface_torch: {at.folder} (train_v2.py's step: DDP in one process, fp16 autocast + "
                    "GradScaler on cuda, PartialFC_V2, CombinedMarginLoss(64, 1.0, 0.5, 0.0), SGD, clip 5, "
                    "loss.item() per step)")
            except (FileNotFoundError, ImportError) as exc:
                lines.append(f"arcface_torch rows skipped: {str(exc).splitlines()[0]}")
                say(lines[-1])
    result: dict = {"header": info, "lines": lines, "rows": [], "speed": [], "pipeline": None, "profile": [],
                    "switches": []}
    with contextlib.ExitStack() as stack:
        out = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        if "steps" in args.parts or "profile" in args.parts:
            t = time.perf_counter()
            result["rows"], result["profile"] = step_rows(args, at, template_problem, peak, out, lines)
            say(f"(steps{' and profiles' if 'profile' in args.parts else ''}: {time.perf_counter() - t:.0f} s)")
        if "profile" in args.parts:
            print_profiles(args, result["profile"])
        if "switches" in args.parts:
            t = time.perf_counter()
            result["switches"] = switch_rows(args, template_problem, out, lines)
            say(f"(switches: {time.perf_counter() - t:.0f} s)")
        if "speed" in args.parts:
            t = time.perf_counter()
            for layer in speed_layers(args):
                result["speed"] += speed_rows(args, layer, template_problem, out, lines)
            say(f"(speed settings: {time.perf_counter() - t:.0f} s)")
    if "pipeline" in args.parts:
        t = time.perf_counter()
        from gpu_suite import pipeline

        result["pipeline"] = pipeline.part(args, result["rows"])
        say(f"(input pipeline: {time.perf_counter() - t:.0f} s)")
    goals(result["rows"], peak)
    say(f"gpu_suite: done in {time.perf_counter() - started:.0f} s on {info['device']}, commit {info['commit']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return result
