"""What the suite prints: the header (device, versions, commit), the rows' table lines, the profiles and the goals;
one place for the columns, so the console and the tests read the same text."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: issue 61's goal: Partial FC's step at most this many milliseconds longer than the full class layer's
PFC_EXTRA_MS = 10


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("GPU_SUITE_COMMIT", "unknown (not a git checkout; set GPU_SUITE_COMMIT)")
    return head + (" + uncommitted changes" if dirty else "")


def say(line: str = "") -> None:
    print(line, flush=True)


def header(args: argparse.Namespace) -> dict:
    import pytorch_lightning as pl
    import torch
    import torchvision

    from gpu_suite.measure import bf16_peak, device_name

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


def compiled_text(status: dict | None, counts: bool = True) -> str:
    """The rows' `compiled` column: what ran, counted (training steps that called the compiled graph)."""
    if not status or not status["applied"]:
        return "eager"
    word = "yes" if status["ran_compiled"] else "NO"
    return f"{word} {status['steps_compiled']}/{status['steps_compiled'] + status['steps_eager']}" if counts else word


def num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def row_text(row: dict, ours, theirs, peak) -> str:
    from gpu_suite.measure import mfu_text

    t, a = row["template"] or {}, row["arcface_torch"] or {}
    def gflop(m):
        return m.flops_per_step / m.batch / 1e9 if m and m.flops_per_step else None

    return (f"{row['backbone']:<11}{row['batch']:>6}  {row['class_layer']:<16}| "
            f"{num(t.get('images_per_s'), ',.1f'):>14} {compiled_text(row['template_compiled']) if ours else '-':>9} "
            f"{mfu_text(ours, peak) if ours else '-':>7} "
            f"{num(gflop(ours), '.2f'):>9} {num(t.get('peak_mib'), ',.0f'):>9} "
            f"{num(t.get('syncs_per_step'), '.1f'):>5} | "
            f"{num(a.get('images_per_s'), ',.1f'):>19} {mfu_text(theirs, peak) if theirs else '-':>7} "
            f"{num(gflop(theirs), '.2f'):>9} {num(a.get('peak_mib'), ',.0f'):>9} "
            f"{num(a.get('syncs_per_step'), '.1f'):>5} | "
            f"{num(row['ratio'], '.2f'):>11} {num(row['memory_ratio'], '.2f'):>9}")


def print_profiles(args, profiles: list[dict]) -> None:
    """torch.profiler over each side's steps at the speed size, taken in the row's process after its timed steps:
    where the step time goes when a row falls short (profiling.py)."""
    from gpu_suite.profiling import Profile, profile_text

    say()
    say(f"profiles: {args.speed_backbone} batch {args.speed_batch}, {args.profile_steps} steps after {args.warmup} "
        "warm-up and the timed steps, in the row's own fit; kernels (annotation ranges apart) by device time (on "
        "a CPU: ops by their own CPU time), share of all, calls per step; where the host waited on the device")
    fields = {f for f in Profile.__dataclass_fields__}
    for p in profiles:
        summary = Profile(**{k: v for k, v in p.items() if k in fields})
        compiled = f" (compiled: {compiled_text(p['compiled'])})" if p.get("compiled") else ""
        for line in profile_text(f"{p['side']} {p['row']}{compiled}", summary):
            say(line)


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


def second_run_text(first, second: dict) -> str:
    """The row run again in its process: the H200 read 70 ms a step there against 85 ms first (issue 71)."""
    m = second["measured"]
    ms = m["seconds_per_step"] * 1e3
    return (f"  the same row run again in its process: {m['batch'] / m['seconds_per_step']:,.1f} images/s, "
            f"{ms:.1f} ms per step against {first.seconds_per_step * 1e3:.1f} first "
            f"({ms / (first.seconds_per_step * 1e3):.3f}x; compiled {compiled_text(second['compiled'])})")


def switch_text(row: dict) -> str:
    """One switch's line (switches.py): its first run, the ratio of its step time to the baseline's."""
    m, caches = row["measured"], row.get("compile_caches") or {}
    ratio = "-" if row["vs_baseline"] is None else f"{row['vs_baseline']:.3f}x"
    keeps = {None: "-", True: "yes", False: "NO"}[row.get("keeps_result")]
    fx = f"{caches.get('fxgraph_cache_hit', 0)}/{caches.get('fxgraph_cache_miss', 0)}"
    line = (f"  {row['switch']:<22}{m['batch'] / m['seconds_per_step']:>10,.1f}{m['seconds_per_step'] * 1e3:>9.1f}"
            f"{ratio:>12}{compiled_text(row['compiled'], counts=False):>10}{keeps:>7}  {fx:>17}"
            f"{num(row.get('process_seconds'), '.0f'):>10}  {row['why']}")
    if row.get("second_run"):
        again = row["second_run"]["measured"]["seconds_per_step"]
        line += f"; second run {again * 1e3:.1f} ms ({again / m['seconds_per_step']:.3f}x its first)"
    return line
