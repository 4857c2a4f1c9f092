"""Issue 39's measurements in one call on a lent GPU: the template's training step against insightface's
arcface_torch on the same GPU, the share of the chip used, peak memory, the speed settings on and off, and the
input pipeline. `benchmarks/gpu_suite.sh` runs it (docs/speed.md, "GPU suite").

    bash benchmarks/gpu_suite.sh --arcface-torch /path/to/insightface/recognition/arcface_torch
    bash benchmarks/gpu_suite.sh --device cpu --backbones tiny --batches 8 ...   (tiny sizes: the test suite)

Rows: iresnet50 and iresnet100 at 128 and 256 images per GPU, with the full class layer at 85,742 classes and
with `model=partial_fc` (rate 0.1) at 2,000,000 classes. Each row times the template's step
(suite_template.py: train.py's module and Trainer with trainer=gpu's defaults: bf16 autocast, heads and centres in
fp32, torch.compile and channels_last by `auto`) and arcface_torch's
(suite_arcface.py: its train_v2.py step, imported from --arcface-torch), and prints images/s, model FLOP
utilisation (FLOPs of one forward + backward from torch.utils.flop_counter over the device's dense bf16 peak),
peak memory and the ratios template / arcface_torch. Then each speed setting on and off at one size (with each
side's losses at steps 0 and 1: a setting keeps the result when they agree within the precision's rounding),
and the input pipeline (suite_pipeline.py) against the fastest model row. A row that cannot be measured (a
wrong --arcface-torch, no bf16 on the device, CUDA out of memory) gets one line saying why; the others run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the script that takes one measurement in a process of its own
JOB_SCRIPT = Path(__file__).resolve().parent / "suite_job.py"
NEEDED = {"hydra": "hydra-core", "omegaconf": "omegaconf", "pytorch_lightning": "pytorch-lightning", "timm": "timm",
          "torchdata": "torchdata", "torchmetrics": "torchmetrics", "torchvision": "torchvision",
          "elasticface": "elasticface (PYTHONPATH=src)"}

#: the speed settings: (name, overrides with it on, overrides with it off); the base is trainer=gpu's defaults
SETTINGS = [
    ("channels_last", ["model.channels_last=true"], ["model.channels_last=false"]),
    ("cudnn.benchmark", ["trainer.benchmark=true"], ["trainer.benchmark=false"]),
    ("fused optimizer", ["optimizer.fused=true", "optimizer.foreach=null"],
     ["optimizer.fused=false", "optimizer.foreach=true"]),
    # on: host reads only on logging steps (every trainer.log_every_n_steps-th, the default 10); off: every step
    ("no host syncs", [], ["trainer.log_every_n_steps=1"]),
    ("model.compile", ["model.compile=true"], ["model.compile=false"]),
    # on: the base itself (compile and channels_last by `auto`); off: the plain eager NCHW step
    ("trainer=gpu defaults", [], ["model.channels_last=false", "model.compile=false"]),
    # the class layer (docs/class_layer.md): the dense [B, C] logits against the chunked step, and the chunked step
    # at a larger chunk (fewer launches); chunk_size 8192 was measured on a CPU
    ("dense class layer", ["model.classifier.path=dense"], ["model.classifier.path=chunked"]),
    ("chunk_size 32768", ["model.classifier.path=chunked", "model.classifier.chunk_size=32768"],
     ["model.classifier.path=chunked", "model.classifier.chunk_size=null"]),
]
#: settings left out on a CPU, and why
CUDA_ONLY = {"cudnn.benchmark": "cuDNN is a GPU library",
             "model.compile": "inductor's C++ build takes minutes on a CPU",
             "trainer=gpu defaults": "inductor's C++ build takes minutes on a CPU"}
#: what identifies a speed run (runs with equal values are measured once)
SETTING_KEYS = ["model.channels_last", "trainer.benchmark", "optimizer.fused", "optimizer.foreach",
                "trainer.log_every_n_steps", "model.compile", "model.classifier.path", "model.classifier.chunk_size"]
#: relative loss difference within which a setting keeps the step's result, by trainer.precision
LOSS_RTOL = {"bf16-mixed": 2.0**-7, "16-mixed": 2.0**-10}
LOSS_RTOL_FP32 = 1e-5
#: issue 61's goal: Partial FC's step at most this many milliseconds longer than the full class layer's
PFC_EXTRA_MS = 10


def run_key(cfg, device: str) -> tuple:
    """What identifies a speed run on `device`, `auto` resolved: runs doing the same are measured once."""
    from omegaconf import OmegaConf

    from elasticface.utils.speed import should_compile, should_use_channels_last

    values = {k: OmegaConf.select(cfg, k) for k in SETTING_KEYS}
    compiled = should_compile(values["model.compile"], device == "cpu")
    values["model.compile"] = compiled
    values["model.channels_last"] = should_use_channels_last(values["model.channels_last"], device == "cpu", compiled)
    return tuple(str(v) for v in values.values())


def missing_packages() -> list[str]:
    missing = []
    for module, package in NEEDED.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    return missing


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("GPU_SUITE_COMMIT", "unknown (not a git checkout; set GPU_SUITE_COMMIT)")
    return head + (" + uncommitted changes" if dirty else "")


def csv_list(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
                   help="which parts: steps, speed, pipeline, profile (torch.profiler at the speed size; not default)")
    p.add_argument("--profile-steps", type=int, default=5, help="steps the profile part records after the warm-up")
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
    unknown = set(args.parts) - {"steps", "speed", "pipeline", "profile"}
    if unknown:
        p.error(f"--parts {','.join(sorted(unknown))}: expected some of steps, speed, pipeline, profile")
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


def say(line: str = "") -> None:
    print(line, flush=True)


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


def header(args: argparse.Namespace) -> dict:
    import pytorch_lightning as pl
    import torch
    import torchvision

    from suite_measure import bf16_peak, device_name

    name = device_name(args.device)
    peak = bf16_peak(name, args.peak_tflops) if args.device == "cuda" else None
    info = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
        "torchvision": torchvision.__version__,
        "pytorch_lightning": pl.__version__,
        "cpu_cores": os.cpu_count(),
        "commit": commit(),
        "bf16_peak_tflops": peak / 1e12 if peak else None,
    }
    say(f"gpu_suite: device {name}; torch {info['torch']} (CUDA {info['cuda']}, cuDNN {info['cudnn']}), torchvision "
        f"{info['torchvision']}, pytorch_lightning {info['pytorch_lightning']}; {info['cpu_cores']} CPU cores; "
        f"commit {info['commit']}")
    say(f"  bf16 peak {f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown (MFU column: unknown peak)'}; "
        f"template precision {args.precision}, head {args.head}"
        f"{', compile and channels_last as trainer=gpu sets them' if args.device == 'cuda' else ', eager'}; "
        f"{args.warmup} warm-up + {args.steps} timed steps per run, synchronised at the ends only")
    return info


def class_layers(args) -> list:
    """The rows' class layers in --layers' order: the full one, and Partial FC unless --pfc-classes 0."""
    from suite_template import Layer

    made = {"full": Layer("default", args.full_classes),
            "pfc": Layer("partial_fc", args.pfc_classes, args.pfc_rate) if args.pfc_classes else None}
    return [made[name] for name in args.layers if made[name] is not None]


def in_own_process(job: dict, out: Path) -> dict:
    """One measurement in a fresh Python process (suite_job.py), so that nothing measured before it can change it
    (dynamo's caches and skipped frames, cuDNN's autotuner, the allocator): its result, or an error line."""
    from suite_job import what

    folder = Path(tempfile.mkdtemp(prefix=f"{job['side']}_{job['backbone']}_{job['batch']}_", dir=out))
    job = {**job, "out_dir": str(folder)}
    job_file, result_file, log_file = folder / "job.json", folder / "result.json", folder / "log.txt"
    job_file.write_text(json.dumps(job, indent=1))
    with log_file.open("w") as log:
        proc = subprocess.run([sys.executable, str(JOB_SCRIPT), str(job_file), str(result_file)], stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if result_file.is_file():
        return json.loads(result_file.read_text())
    last = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()][-1:] or [""]
    return {"error": f"{what(job)}: its process exited with code {proc.returncode} ({last[0].strip()[:200]}; "
                     f"log: {log_file})"}


def template_job(args, backbone: str, batch: int, layer, extra: list[str] = (), steps: int | None = None,
                 flops: bool = False, profile: bool = False) -> dict:
    import suite_template

    overrides = suite_template.overrides(backbone, batch, layer, args.device, args.precision, args.head,
                                         args.compile_backend) + list(extra)
    return {"side": "template", "backbone": backbone, "batch": batch, "layer": vars(layer), "device": args.device,
            "precision": args.precision, "overrides": overrides, "warmup": args.warmup,
            "steps": args.steps if steps is None else steps, "flops": flops,
            "profile_steps": args.profile_steps if profile else 0}


def arcface_job(args, backbone: str, batch: int, layer, flops: bool, profile: bool) -> dict:
    return {"side": "arcface_torch", "arcface_torch": args.arcface_torch, "backbone": backbone, "batch": batch,
            "layer": vars(layer), "device": args.device, "warmup": args.warmup, "steps": args.steps, "flops": flops,
            "profile_steps": args.profile_steps if profile else 0}


def measured_of(result: dict, lines: list[str]):
    """The Measured of a job's result, or None with its error line printed and kept."""
    from suite_measure import Measured

    for key in ("error", "profile_error"):
        if result.get(key):
            lines.append(result[key])
            say(result[key])
    if result.get("error"):
        return None
    return Measured(**result["measured"])


def compiled_text(status: dict | None, counts: bool = True) -> str:
    """The rows' `compiled` column: what ran, counted (training steps that called the compiled graph)."""
    if not status or not status["applied"]:
        return "eager"
    word = "yes" if status["ran_compiled"] else "NO"
    return f"{word} {status['steps_compiled']}/{status['steps_compiled'] + status['steps_eager']}" if counts else word


def step_rows(args, at, template_problem: str | None, peak: float | None, out: Path, lines: list[str]
              ) -> tuple[list[dict], list[dict]]:
    """The rows (each side of each in its own process) and the profiles taken after the rows at the speed size.
    Without the steps part, only the speed size's rows run, for their profiles."""
    from suite_arcface import NETWORKS
    from suite_job import what

    layers = class_layers(args)
    steps_part, profile_part = "steps" in args.parts, "profile" in args.parts
    say()
    if steps_part:
        say(f"{'backbone':<11}{'batch':>6}  {'class layer':<16}| {'template img/s':>14} {'compiled':>9} {'MFU':>7} "
            f"{'GFLOP/img':>9} {'peak MiB':>9} {'syncs':>5} | {'arcface_torch img/s':>19} {'MFU':>7} {'GFLOP/img':>9} "
            f"{'peak MiB':>9} {'syncs':>5} | {'img/s ratio':>11} {'mem ratio':>9}")
    else:
        say(f"profiles only: {args.speed_backbone} batch {args.speed_batch}, each side in its own process")
    rows, profiles = [], []
    sizes = [(b, n) for b in args.backbones for n in args.batches] if steps_part else \
        [(args.speed_backbone, args.speed_batch)]
    for backbone, batch in sizes:
        for layer in layers:
            profiled = profile_part and (backbone, batch) == (args.speed_backbone, args.speed_batch)
            results = {}
            timed = None if steps_part else 1  # profiles only: one timed step before the profiled ones
            if template_problem is None:
                results["template"] = in_own_process(
                    template_job(args, backbone, batch, layer, steps=timed, flops=steps_part, profile=profiled), out)
            if at is not None:
                job = {**arcface_job(args, backbone, batch, layer, flops=steps_part, profile=profiled),
                       "steps": timed or args.steps}
                if backbone not in NETWORKS:
                    results["arcface_torch"] = {"error": f"{what(job)}: backbone {backbone} has no arcface_torch "
                                                         f"counterpart (it has {', '.join(NETWORKS)})"}
                else:
                    results["arcface_torch"] = in_own_process(job, out)
            ours = measured_of(results["template"], lines) if "template" in results else None
            theirs = measured_of(results["arcface_torch"], lines) if "arcface_torch" in results else None
            if theirs is not None and theirs.note and theirs.note not in lines:
                lines.append(theirs.note)
                say(f"arcface_torch: {theirs.note}")
            for side, result in results.items():
                if result.get("profile"):
                    profiles.append({"side": side, "row": f"{backbone} batch {batch} {layer.label}",
                                     "pid": result["pid"], **result["profile"]})
            if steps_part:
                status = results.get("template", {}).get("compiled")
                rows.append(row_dict(backbone, batch, layer, ours, theirs, peak, status,
                                     {side: r.get("pid") for side, r in results.items()}))
                say(row_text(rows[-1], ours, theirs, peak))
    return rows, profiles


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def row_dict(backbone, batch, layer, ours, theirs, peak, compiled: dict | None = None, pids: dict | None = None
             ) -> dict:
    from suite_measure import mfu_text

    def side(m):
        if m is None:
            return None
        return {"images_per_s": m.images_per_s, "seconds_per_step": m.seconds_per_step, "peak_mib": m.peak_mib,
                "flops_per_step": m.flops_per_step, "mfu": mfu_text(m, peak), "losses": m.losses,
                "syncs_per_step": m.syncs_per_step}

    ratio = ours.images_per_s / theirs.images_per_s if ours and theirs else None
    mem = ours.peak_mib / theirs.peak_mib if ours and theirs and ours.peak_mib and theirs.peak_mib else None
    return {"backbone": backbone, "batch": batch, "class_layer": layer.label, "classes": layer.classes,
            "template": side(ours), "template_compiled": compiled, "arcface_torch": side(theirs), "ratio": ratio,
            "memory_ratio": mem, "pids": pids or {}}


def row_text(row: dict, ours, theirs, peak) -> str:
    from suite_measure import mfu_text

    t, a = row["template"] or {}, row["arcface_torch"] or {}
    def gflop(m):
        return m.flops_per_step / m.batch / 1e9 if m and m.flops_per_step else None

    return (f"{row['backbone']:<11}{row['batch']:>6}  {row['class_layer']:<16}| "
            f"{_num(t.get('images_per_s'), ',.1f'):>14} {compiled_text(row['template_compiled']) if ours else '-':>9} "
            f"{mfu_text(ours, peak) if ours else '-':>7} "
            f"{_num(gflop(ours), '.2f'):>9} {_num(t.get('peak_mib'), ',.0f'):>9} "
            f"{_num(t.get('syncs_per_step'), '.1f'):>5} | "
            f"{_num(a.get('images_per_s'), ',.1f'):>19} {mfu_text(theirs, peak) if theirs else '-':>7} "
            f"{_num(gflop(theirs), '.2f'):>9} {_num(a.get('peak_mib'), ',.0f'):>9} "
            f"{_num(a.get('syncs_per_step'), '.1f'):>5} | "
            f"{_num(row['ratio'], '.2f'):>11} {_num(row['memory_ratio'], '.2f'):>9}")


def speed_layers(args) -> list:
    """The class layers the speed settings run at (--speed-layers), from the rows' own."""
    return [layer for layer in class_layers(args) if ("pfc" if layer.rate else "full") in args.speed_layers]


def speed_rows(args, layer, template_problem: str | None, out: Path, lines: list[str]) -> list[dict]:
    """Each speed setting on and off at one size and class layer, each run in its own process; runs with the same
    settings are measured once."""
    from suite_measure import Measured
    import suite_template

    say()
    say(f"speed settings: {args.speed_backbone} batch {args.speed_batch} {layer.label}, trainer="
        f"{'gpu' if args.device == 'cuda' else 'cpu'} defaults otherwise; keeps result: losses at steps 0 and 1 within "
        f"{LOSS_RTOL.get(args.precision, LOSS_RTOL_FP32):.2g} relative ({args.precision})")
    if template_problem is not None:
        say(f"  {template_problem}")
        return []
    cache: dict[tuple, tuple[Measured, str] | str] = {}  # the run's figures and what ran compiled, or its error

    def measure(extra: list[str]):
        job = template_job(args, args.speed_backbone, args.speed_batch, layer, extra)
        key = run_key(suite_template.compose(job["overrides"], out / "speed_key"), args.device)
        if key not in cache:
            result = in_own_process(job, out)
            if result.get("error"):
                cache[key] = f"speed {layer.label} {' '.join(extra) or 'defaults'}: {result['error']}"
                lines.append(cache[key])
                say(f"  {cache[key]}")
            else:
                cache[key] = Measured(**result["measured"]), compiled_text(result["compiled"], counts=False)
        return cache[key]

    rtol = LOSS_RTOL.get(args.precision, LOSS_RTOL_FP32)
    say(f"  {'setting':<25}{'off img/s':>11}{'on img/s':>11}{'on/off':>8}{'compiled off/on':>17}{'syncs off/on':>14}   "
        f"{'loss steps 0, 1 off':<24}{'loss steps 0, 1 on':<24}{'last off/on':<18}{'max rel diff':>12}  keeps result")
    rows = []
    for name, on, off in (setting for setting in SETTINGS if setting[0] in args.settings):
        if name in CUDA_ONLY and args.device != "cuda":
            say(f"  {name:<25}measured on the GPU only ({CUDA_ONLY[name]})")
            continue
        off_run, on_run = measure(off), measure(on)
        if isinstance(off_run, str) or isinstance(on_run, str):
            continue
        (a, a_compiled), (b, b_compiled) = off_run, on_run
        rel = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(b.losses[:2], a.losses[:2]))
        row = {"setting": name, "class_layer": layer.label, "off": a.images_per_s, "on": b.images_per_s,
               "ratio": b.images_per_s / a.images_per_s, "compiled_off": a_compiled, "compiled_on": b_compiled,
               "syncs_off": a.syncs_per_step, "syncs_on": b.syncs_per_step, "losses_off": a.losses,
               "losses_on": b.losses, "max_rel_diff": rel, "keeps_result": rel <= rtol}
        rows.append(row)
        say(f"  {name:<25}{a.images_per_s:>11,.1f}{b.images_per_s:>11,.1f}{row['ratio']:>8.3f}"
            f"{a_compiled + '/' + b_compiled:>17}"
            f"{_num(a.syncs_per_step, '.1f'):>7}/{_num(b.syncs_per_step, '.1f'):<6}   "
            f"{', '.join(f'{x:.6f}' for x in a.losses[:2]):<24}{', '.join(f'{x:.6f}' for x in b.losses[:2]):<24}"
            f"{a.losses[-1]:.4f}/{b.losses[-1]:<10.4f}{rel:>12.2e}  {'yes' if row['keeps_result'] else 'NO'}")
    return rows


def print_profiles(args, profiles: list[dict]) -> None:
    """torch.profiler over each side's steps at the speed size, taken in the row's process after its timed steps:
    where the step time goes when a row falls short (suite_profile.py)."""
    from suite_profile import Profile, profile_text

    say()
    say(f"profiles: {args.speed_backbone} batch {args.speed_batch}, {args.profile_steps} steps after {args.warmup} "
        "warm-up, in each row's process after its timed steps; kernels (annotation ranges apart) by device time (on "
        "a CPU: ops by their own CPU time), share of all, calls per step; where the host waited on the device")
    fields = {f for f in Profile.__dataclass_fields__}
    for p in profiles:
        summary = Profile(**{k: v for k, v in p.items() if k in fields})
        compiled = f" (compiled: {compiled_text(p['compiled'])})" if p.get("compiled") else ""
        for line in profile_text(f"{p['side']} {p['row']}{compiled}", summary):
            say(line)


def pipeline_part(args, rows: list[dict]) -> dict:
    import suite_pipeline

    say()
    workers = args.workers if args.workers is not None else suite_pipeline.cores()
    with tempfile.TemporaryDirectory() as tmp:
        result = suite_pipeline.measure(tmp, args.pipeline_images, workers, max(args.batches), args.passes,
                                        args.device)
    fastest = max(((r["template"]["images_per_s"], r) for r in rows if r.get("template")), default=None,
                  key=lambda t: t[0])
    need = fastest[0] if fastest else None
    where = f"{fastest[1]['backbone']} batch {fastest[1]['batch']} {fastest[1]['class_layer']}" if fastest else ""

    def versus(rate: float | None) -> str:
        if rate is None or need is None:
            return ""
        verdict = "not the bottleneck" if rate >= need else "THE BOTTLENECK"
        return f" = {rate / need:.2f}x the fastest template row ({where}, {need:,.1f} images/s): {verdict}"

    say(f"input pipeline: RecordIO of {result.images} 112x112 JPEGs written by elasticface-convert's writer, "
        f"decode + flip + scale, {args.passes} passes")
    say(f"  CPU, {result.cpu_workers} loader workers: {result.cpu_images_per_s:,.1f} images/s"
        f"{versus(result.cpu_images_per_s)}")
    if result.gpu_images_per_s is not None:
        say(f"  GPU JPEG decoder (torchvision.io.decode_jpeg on cuda, bytes in memory): "
            f"{result.gpu_images_per_s:,.1f} images/s{versus(result.gpu_images_per_s)}")
    else:
        say(f"  GPU JPEG decoder: not measured ({result.gpu_note})")
    return {"images": result.images, "cpu_workers": result.cpu_workers, "cpu_images_per_s": result.cpu_images_per_s,
            "gpu_images_per_s": result.gpu_images_per_s, "gpu_note": result.gpu_note, "model_images_per_s": need}


def goals(rows: list[dict], peak: float | None) -> None:
    """Issues 39's and 61's goals for iresnet100, row by row (read, not enforced)."""
    r100 = [r for r in rows if r["backbone"] == "iresnet100" and r["template"]]
    if not r100:
        return
    say()
    say("goals (iresnet100): >= 1.0x arcface_torch's images/s, >= 30% MFU, peak memory <= arcface_torch's, "
        f"Partial FC at most {PFC_EXTRA_MS} ms per step over the full layer")
    for r in r100:
        mfu = r["template"]["mfu"]
        if mfu.endswith("%"):
            mfu += " yes" if float(mfu[:-1]) >= 30 else " NO"
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}x {'yes' if r['ratio'] >= 1 else 'NO'}"
        mem = r["memory_ratio"]
        mem = "n/a" if mem is None else f"{mem:.2f} {'yes' if mem <= 1 else 'NO'}"
        say(f"  batch {r['batch']} {r['class_layer']}: speed {ratio}; MFU {mfu}; memory {mem}")
    # Partial FC's extra cost per step over the full class layer, each side against its own full row
    for batch in sorted({r["batch"] for r in r100}):
        by_layer = {("pfc" if r["class_layer"].startswith("pfc") else "full"): r for r in r100 if r["batch"] == batch}
        if set(by_layer) != {"full", "pfc"}:
            continue
        extra = {side: (by_layer["pfc"][side]["seconds_per_step"] - by_layer["full"][side]["seconds_per_step"]) * 1e3
                 for side in ("template", "arcface_torch") if by_layer["pfc"][side] and by_layer["full"][side]}
        theirs = f" (arcface_torch: {extra['arcface_torch']:+.1f} ms)" if "arcface_torch" in extra else ""
        say(f"  batch {batch}: Partial FC costs {extra['template']:+.1f} ms per step more than the full layer "
            f"{'yes' if extra['template'] <= PFC_EXTRA_MS else 'NO'} (goal <= {PFC_EXTRA_MS} ms){theirs}")


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
    from suite_measure import bf16_peak

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
                import suite_arcface

                at = suite_arcface.load(args.arcface_torch)
                say(f"arcface_torch: {at.folder} (train_v2.py's step: DDP in one process, fp16 autocast + "
                    "GradScaler on cuda, PartialFC_V2, CombinedMarginLoss(64, 1.0, 0.5, 0.0), SGD, clip 5, "
                    "loss.item() per step)")
            except (FileNotFoundError, ImportError) as exc:
                lines.append(f"arcface_torch rows skipped: {str(exc).splitlines()[0]}")
                say(lines[-1])
    result: dict = {"header": info, "lines": lines, "rows": [], "speed": [], "pipeline": None, "profile": []}
    with contextlib.ExitStack() as stack:
        out = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        if "steps" in args.parts or "profile" in args.parts:
            t = time.perf_counter()
            result["rows"], result["profile"] = step_rows(args, at, template_problem, peak, out, lines)
            say(f"(steps{' and profiles' if 'profile' in args.parts else ''}: {time.perf_counter() - t:.0f} s)")
        if "profile" in args.parts:
            print_profiles(args, result["profile"])
        if "speed" in args.parts:
            t = time.perf_counter()
            for layer in speed_layers(args):
                result["speed"] += speed_rows(args, layer, template_problem, out, lines)
            say(f"(speed settings: {time.perf_counter() - t:.0f} s)")
    if "pipeline" in args.parts:
        t = time.perf_counter()
        result["pipeline"] = pipeline_part(args, result["rows"])
        say(f"(input pipeline: {time.perf_counter() - t:.0f} s)")
    goals(result["rows"], peak)
    say(f"gpu_suite: done in {time.perf_counter() - started:.0f} s on {info['device']}, commit {info['commit']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
