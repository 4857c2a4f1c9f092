"""Eager NCHW, eager NHWC and compiled training steps of each backbone family on this device: the measurements
behind `model.compile=auto` and `model.channels_last=auto` (elasticface.utils.speed.AUTO_LAYOUT).

One step = backbone forward, a linear class layer and cross-entropy, backward, SGD. Each layout of each family runs
in its own process (dynamo's caches, oneDNN's primitive cache and the allocator start empty, as in a training run),
warm-up steps first (for the compiled one, its compilation, timed on its own in wall time), then the median of the
timed steps (CPU time of the process on a CPU: run it with --threads 1 on a shared machine).
The verdict per family is the ratio against eager NCHW in the same run, and the steps a compiled run needs to win its
compilation back.

    python benchmarks/bench_layout.py       # iresnet_tiny (backbone=tiny), mobilefacenet_y1, iresnet18 on the CPU
    python benchmarks/bench_layout.py --backbones mobilefacenet_y1 --batch 64 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LAYOUTS = ("eager_nchw", "eager_nhwc", "compiled")
#: a step's time: this process's CPU time on a CPU, so that other work on a shared machine does not count (with
#: one torch thread the step runs in this process alone); wall time on a GPU
CLOCK = time.process_time


def measure(backbone: str, layout: str, batch: int, steps: int, warmup: int, device: str) -> dict[str, float]:
    """One layout of one backbone, in this process: seconds per step (median) and the warm-up's seconds."""
    global CLOCK
    import torch
    from torch import nn

    if device != "cpu":
        CLOCK = time.perf_counter

    from elasticface.backbones.build import build_backbone
    from elasticface.utils.speed import compile_in_place

    torch.manual_seed(0)
    model = build_backbone(backbone, embedding_size=128 if "mobilefacenet" in backbone else 512).to(device)
    head = nn.Linear(128 if "mobilefacenet" in backbone else 512, 1000).to(device)
    optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.01, momentum=0.9)
    images = torch.randn(batch, 3, 112, 112, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    counter = None
    if layout == "eager_nhwc":
        model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    elif layout == "compiled":
        counter = compile_in_place(model)

    def step() -> None:
        loss = nn.functional.cross_entropy(head(model(images)), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()

    started = time.perf_counter()
    for _ in range(warmup):
        step()
    warmup_seconds = time.perf_counter() - started
    times = []
    for _ in range(steps):
        started = CLOCK()
        step()
        times.append(CLOCK() - started)
    if counter is not None and counter.calls < warmup + steps:
        raise RuntimeError(f"{backbone}: {counter.calls} of {warmup + steps} steps ran the compiled graph")
    return {"step_s": statistics.median(times), "warmup_s": warmup_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbones", default="iresnet_tiny,mobilefacenet_y1,iresnet18")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads per process (default: torch's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # backbone:layout, in a child process
    args = parser.parse_args(argv)
    if args.one:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        backbone, layout = args.one.split(":")
        print(json.dumps(measure(backbone, layout, args.batch, args.steps, args.warmup, args.device)))
        return 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    rows = []
    for backbone in args.backbones.split(","):
        row: dict[str, object] = {"backbone": backbone}
        for layout in LAYOUTS:
            command = [sys.executable, __file__, "--one", f"{backbone}:{layout}", "--batch", str(args.batch),
                       "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device]
            command += ["--threads", str(args.threads)] if args.threads else []
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                print(f"{backbone} {layout}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            row[layout] = json.loads(done.stdout.strip().splitlines()[-1])
        base = row.get("eager_nchw")
        if isinstance(base, dict):
            parts = [f"{backbone:18s} eager NCHW {args.batch / base['step_s']:7.1f} img/s"]
            for layout in LAYOUTS[1:]:
                measured = row.get(layout)
                if isinstance(measured, dict):
                    parts.append(f"{layout} {base['step_s'] / measured['step_s']:.2f}x")
            compiled = row.get("compiled")
            if isinstance(compiled, dict):
                gain = min(base["step_s"], row.get("eager_nhwc", base)["step_s"]) - compiled["step_s"]
                parts.append(f"compile {compiled['warmup_s']:.0f} s, won back after "
                             + (f"{compiled['warmup_s'] / gain:.0f} steps" if gain > 0 else "never"))
            print("  ".join(parts))
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
