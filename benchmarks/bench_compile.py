"""Eager against compiled training, step by step, and their images/s: the same seed and config, three runs.

- `eager`: `python train.py <overrides> model.compile=false`
- `rounding`: eager again, with every initial backbone weight moved by one float32 rounding (x (1 ± 2^-24)):
  how far two runs that differ only in rounding drift apart, step by step (training is chaotic: a rounding
  difference grows). An equivalent compiled run stays within this envelope.
- `compiled`: `model.compile=true`.

Each run is a real `python train.py` with the StepTrace callback (elasticface.callbacks.step_trace): per step
the batch (checksums), loss, backbone gradient norm, learning rate, BatchNorm running statistics; per
validation the backbone's mode and whether its compiled call was used; the graphs torch.compile built. The
verdict: the first step where each run's loss leaves eager's by more than --rel (relative), the drift at
chosen steps, and images/s as compiled / eager from the runs' summary.json (compilation included).

    python benchmarks/bench_compile.py                                   # make train's run (5 epochs)
    python benchmarks/bench_compile.py debug=tiny trainer.max_epochs=100 checkpoint.every_n_steps=100000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TRACE = "elasticface.callbacks.step_trace.StepTrace"
RUNS = {"eager": ["model.compile=false"],
        "rounding": ["model.compile=false", f"+callbacks.step_trace.perturb={2.0 ** -24!r}"],
        "compiled": ["model.compile=true"]}


def train(name: str, overrides: list[str], out: Path) -> tuple[dict, dict]:
    trace = out / f"{name}.pt"
    cmd = [sys.executable, str(ROOT / "train.py"), *overrides, *RUNS[name], f"paths.output_dir={out / name}",
           f"+callbacks.step_trace._target_={TRACE}", f"+callbacks.step_trace.path={trace}",
           "extras.print_config=false"]
    print("$", " ".join(cmd[1:]), flush=True)
    env = {**os.environ, "WANDB_SILENT": "true"}
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
    summary = json.loads((out / name / "summary.json").read_text())
    return torch.load(trace, weights_only=True), summary


def rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Relative difference per step (rows), the vector norm for 2-D inputs."""
    if a.dim() == 2:
        return (a - b).norm(dim=1) / a.norm(dim=1).clamp_min(1e-30)
    return (a - b).abs() / a.abs().clamp_min(1e-30)


def compare(ref: dict, other: dict, threshold: float) -> dict:
    n = min(len(ref["loss"]), len(other["loss"]))
    loss = rel(ref["loss"][:n], other["loss"][:n])
    above = (loss > threshold).nonzero()
    return {
        "steps": n,
        "same_batches": bool(torch.equal(ref["labels"][:n], other["labels"][:n])
                             and torch.equal(ref["images_sum"][:n], other["images_sum"][:n])),
        "same_lr": bool(torch.equal(ref["lr"][:n], other["lr"][:n])),
        "loss": loss, "grad_norm": rel(ref["grad_norm"][:n], other["grad_norm"][:n]),
        "bn_stats": rel(ref["bn_stats"][:n], other["bn_stats"][:n]),
        "first_step_above": int(above[0]) + 1 if len(above) else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="train.py overrides shared by the three runs")
    parser.add_argument("--rel", type=float, default=1e-3, help="relative loss difference reported as 'left'")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_compile_"))
    runs = {name: train(name, args.overrides, out) for name in RUNS}
    eager, eager_summary = runs["eager"]
    print(f"\n{len(eager['loss'])} steps, runs in {out}")
    print(f"{'run':10s} {'batches':>8s} {'lr':>5s} {'graphs':>6s} {'left eager at':>13s} {'images/s':>9s} "
          f"{'ratio':>6s} {'val acc (best)':>15s}  validation backbone")
    base_ips = eager_summary.get("images_per_second") or float("nan")
    cmp = {}
    for name, (trace, summary) in runs.items():
        c = compare(eager, trace, args.rel)
        cmp[name] = c
        ips = summary.get("images_per_second") or float("nan")
        acc = summary.get("val/acc_mean") or {}
        modes = {("train" if t else "eval") + (" compiled" if k else " eager")
                 for t, k in zip(trace["val_training"].tolist(), trace["val_compiled"].tolist())}
        print(f"{name:10s} {str(c['same_batches']):>8s} {str(c['same_lr']):>5s} {int(trace['graphs_compiled']):>6d} "
              f"{str(c['first_step_above'] or '-'):>13s} {ips:9.1f} {ips / base_ips:6.2f} "
              f"{acc.get('final', float('nan')):7.4f} ({acc.get('best', float('nan')):.4f})  "
              f"{', '.join(sorted(modes))}")
    n = cmp["compiled"]["steps"]
    marks = sorted({s for s in (1, 2, 3, 5, 10, 20, 50, 100, 200, 300, 500, n) if s <= n})
    print("\nrelative difference from eager at step k: loss | backbone grad norm | BN running stats")
    print(f"{'step':>5s} {'eager loss':>11s} {'rounding':>32s} {'compiled':>32s}")
    for s in marks:
        cells = [" ".join(f"{cmp[r][q][s - 1]:.1e}".rjust(10) for q in ("loss", "grad_norm", "bn_stats"))
                 for r in ("rounding", "compiled")]
        print(f"{s:5d} {float(eager['loss'][s - 1]):11.4f} {cells[0]:>32s} {cells[1]:>32s}")


if __name__ == "__main__":
    main()
