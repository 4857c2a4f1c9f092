"""Full training steps through the LightningModule and Trainer vs a plain PyTorch loop, in the same run.

One step = backbone -> centres -> margin head -> cross-entropy -> backward -> backbone gradient clipping
-> optimizer -> scheduler, on batches already in memory (the data pipeline is bench_data.py's). The
Lightning side is what `python train.py` builds: the same config, callbacks (divergence guard,
throughput, progress, checkpoints, learning-rate monitor), logger and Trainer, minus validation. The
plain side is the loop a user would write for the same model, loss and optimizer. Runs alternate
(plain, Lightning, Lightning, plain, ...) so that drift on a shared machine hits both alike; the
verdict is the ratio of the medians: Lightning's time per step / the plain loop's.

Cases:
- `tiny`: the default model (`backbone=tiny`, 200 classes, batch 64): goal ratio <= 1.03 on a CPU.
- `zero`: a linear backbone on 8x8 images, 16 classes, 32-d embeddings: the step does almost nothing,
  so the difference per step is the framework's own overhead, in milliseconds (goal <= 2 ms).
- `--device cuda`: iresnet50 and iresnet100 at `--batch` (default 256) in bf16, with the model FLOP
  utilisation: FLOPs of one step counted by torch.utils.flop_counter, over the device's dense bf16 peak.

    python benchmarks/bench_train.py                          # both CPU cases (about 2 min on 2 cores)
    python benchmarks/bench_train.py --case tiny --precision bf16-mixed --channels-last --compile
    python benchmarks/bench_train.py --device cuda --batch 512
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

# this checkout's package before an installed one: comparing two trees runs each tree's own code
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

CLOCK = [time.perf_counter]  # --clock: wall time, or this process's CPU time (time.process_time)

#: dense bf16 peak (FLOP/s) by device name, for the model FLOP utilisation; the first key contained in the
#: device's name wins, so "H100 PCIe" (756) and "H100 NVL" come before "H100" (SXM, 989)
BF16_PEAK = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,
    "H200": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
    "L4": 121e12,
    "V100": 125e12,
    "RTX 4090": 165e12,
}


class LinearBackbone(nn.Module):
    """The near-zero model: flatten the image, one linear layer to the embedding."""

    def __init__(self, embedding_size: int = 32, image_size: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(3 * image_size * image_size, embedding_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(images.flatten(1))


CASES = {
    # name: (overrides, image size, classes)
    "tiny": ([], 112, 200),
    "zero": (["model.embedding_size=32"], 8, 16),
    "iresnet50": (["backbone=iresnet50"], 112, 10_000),
    "iresnet100": (["backbone=iresnet100"], 112, 10_000),
}


class Batches(torch.utils.data.Dataset):
    """`steps` batches cycling over a few made in memory (Lightning needs a DataLoader; batch_size=None)."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> None:
        self.batches, self.steps = batches, steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[i % len(self.batches)]


def make_batches(batch: int, image_size: int, classes: int, device: str, n: int = 4) -> list:
    g = torch.Generator().manual_seed(0)
    return [
        (
            torch.rand(batch, 3, image_size, image_size, generator=g).mul_(2).sub_(1).to(device),
            torch.randint(0, classes, (batch,), generator=g).to(device),
        )
        for _ in range(n)
    ]


class StepClock:
    """Lightning callback: wall time from the start of step `warmup` to the end of the last step."""

    def __new__(cls, warmup: int, steps: int, device: str):
        import pytorch_lightning as pl

        class _Clock(pl.Callback):
            seconds = float("nan")

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                if batch_idx == warmup:
                    _sync(device)
                    self._t0 = CLOCK[0]()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if batch_idx == steps - 1:
                    _sync(device)
                    self.seconds = CLOCK[0]() - self._t0

        return _Clock()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def lightning_seconds(cfg, batches, warmup: int, steps: int, device: str) -> float:
    """Seconds per step of `trainer.fit` as train.py builds it (its callbacks, logger and Trainer)."""
    import pytorch_lightning as pl

    from elasticface.training import build_module, build_trainer

    pl.seed_everything(0, workers=False, verbose=False)
    module = build_module(cfg, cfg.bench_classes)
    trainer, _ = build_trainer(cfg)
    clock = StepClock(warmup, warmup + steps, device)
    trainer.callbacks.append(clock)
    loader = torch.utils.data.DataLoader(Batches(batches, warmup + steps), batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=loader)
    return clock.seconds / steps


def plain_seconds(cfg, batches, warmup: int, steps: int, device: str) -> float:
    """Seconds per step of the loop a user would write: same model, loss, clipping, optimizer, scheduler."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate

    from elasticface.training import build_module

    pl.seed_everything(0, workers=False, verbose=False)
    module = build_module(cfg, cfg.bench_classes).to(device).train()
    optimizer = instantiate(module.hparams.optimizer)(params=module.parameters())
    total = warmup + steps
    scheduler = (
        instantiate(module.hparams.scheduler)(optimizer=optimizer, total_steps=total)
        if module.hparams.scheduler
        else None
    )
    precision = str(cfg.trainer.precision)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled="bf16" in precision)
    clip = module.hparams.clip_grad_norm
    t0 = 0.0
    for i in range(total):
        if i == warmup:
            _sync(device)
            t0 = CLOCK[0]()
        images, labels = batches[i % len(batches)]
        with autocast:
            loss = module.classifier(module.embed(images), labels).loss
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(module.backbone.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
    _sync(device)
    return (CLOCK[0]() - t0) / steps


def step_flops(cfg, batches, device: str) -> int:
    """FLOPs of one training step (forward + backward), counted by torch.utils.flop_counter."""
    from torch.utils.flop_counter import FlopCounterMode

    from elasticface.training import build_module

    module = build_module(cfg, cfg.bench_classes).to(device).train()
    images, labels = batches[0]
    with FlopCounterMode(display=False) as counter:
        with torch.autocast(device, dtype=torch.bfloat16, enabled="bf16" in str(cfg.trainer.precision)):
            loss = module.classifier(module.embed(images), labels).loss
        loss.backward()
    return counter.get_total_flops()


def device_peak(name: str, override: float | None) -> float | None:
    if override:
        return override * 1e12
    return next((peak for key, peak in BF16_PEAK.items() if key in name), None)


def bench_case(case: str, args: argparse.Namespace, out: Path) -> dict:
    from omegaconf import open_dict

    extra, image_size, classes = CASES[case]
    batch = args.batch or (64 if args.device == "cpu" else 256)
    overrides = [
        *extra,
        f"data.batch_size={batch}",
        "logger=csv",
        f"trainer.precision={args.precision}",
        f"model.compile={str(args.compile).lower()}",
        f"model.channels_last={str(args.channels_last).lower()}",
        "extras.print_config=false",
        "trainer.enable_model_summary=false",
        "trainer.limit_val_batches=0",
        "trainer.max_epochs=1",
        "trainer.max_steps=-1",
        f"trainer.accelerator={'gpu' if args.device == 'cuda' else 'cpu'}",
        "trainer.devices=1",
        *[f"optimizer.{k}" for k in args.optimizer],
        *args.overrides,
    ]
    from elasticface.cli.compose import compose_train

    cfg = compose_train(overrides, out / case)
    with open_dict(cfg):
        cfg.bench_classes = classes
        if case == "zero":
            cfg.model.backbone = {
                "_target_": f"{__name__}.LinearBackbone",
                "embedding_size": 32,
                "image_size": image_size,
            }
    batches = make_batches(batch, image_size, classes, args.device)
    plain, light = [], []
    for r in range(args.repeats):
        order = ("plain", "lightning") if r % 2 == 0 else ("lightning", "plain")
        for side in order:
            if side == "plain":
                plain.append(plain_seconds(cfg, batches, args.warmup, args.steps, args.device))
            else:
                light.append(lightning_seconds(cfg, batches, args.warmup, args.steps, args.device))
    p, lt = statistics.median(plain), statistics.median(light)
    row = {
        "case": case,
        "batch": batch,
        "plain_ips": batch / p,
        "lightning_ips": batch / lt,
        "ratio": lt / p,
        "overhead_ms": 1e3 * (lt - p),
        "plain_all": plain,
        "lightning_all": light,
    }
    if args.device == "cuda" or args.flops:
        flops = step_flops(cfg, batches, args.device)
        row["gflop_per_image"] = flops / batch / 1e9
        name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        peak = device_peak(name, args.peak_tflops)
        row["mfu"] = flops / lt / peak if peak else None
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--case",
        action="append",
        choices=sorted(CASES),
        help="default: tiny and zero on cpu, iresnet50 and iresnet100 on cuda",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=None, help="default 64 on cpu, 256 on cuda")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per run (default 30 tiny, 300 zero)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 5; 20 with --compile)")
    parser.add_argument("--repeats", type=int, default=4, help="runs per side, alternating")
    parser.add_argument(
        "--precision", default=None, help="trainer.precision (default 32-true on cpu, bf16-mixed on cuda)"
    )
    parser.add_argument("--compile", action="store_true", help="model.compile=true")
    parser.add_argument("--channels-last", action="store_true", help="model.channels_last=true")
    parser.add_argument(
        "--optimizer",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="optimizer.KEY=VALUE, e.g. --optimizer fused=false --optimizer foreach=true",
    )
    parser.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default=None,
        help="cpu: this process's CPU time (default on cpu: other jobs on a shared machine add wall "
        "time, not CPU time, when one thread is used); wall: elapsed time (default on cuda)",
    )
    parser.add_argument("--flops", action="store_true", help="also count FLOPs on cpu (always on cuda)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak, if not known")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: 1 on cpu: on a busy machine a second OpenMP thread that is "
        "descheduled stalls every parallel kernel, which swamps what is measured)",
    )
    parser.add_argument("overrides", nargs="*", help="more train.py overrides, e.g. head=elastic_arc_plus")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device visible to torch")
    args.clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    args.precision = args.precision or ("bf16-mixed" if args.device == "cuda" else "32-true")
    args.warmup = args.warmup if args.warmup is not None else (20 if args.compile else 5)
    torch.set_num_threads(args.threads or (1 if args.device == "cpu" else torch.get_num_threads()))
    cases = args.case or (["tiny", "zero"] if args.device == "cpu" else ["iresnet50", "iresnet100"])
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(
        f"bench_train: {device_name}; precision {args.precision}, compile {args.compile}, channels_last "
        f"{args.channels_last}, optimizer {args.optimizer or 'as configured'}; "
        f"{args.repeats} runs per side, {args.clock} clock"
    )
    os.environ.setdefault("WANDB_MODE", "offline")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            steps = args.steps or (300 if case == "zero" else 30)
            row = bench_case(case, argparse.Namespace(**{**vars(args), "steps": steps}), Path(tmp))
            rows.append(row)
            mfu = f"  MFU {100 * row['mfu']:.1f}%" if row.get("mfu") else ""
            flop = f"  {row['gflop_per_image']:.2f} GFLOP/image" if "gflop_per_image" in row else ""
            print(
                f"{case:>10} batch {row['batch']}: plain loop {row['plain_ips']:8.1f} images/s   Lightning "
                f"{row['lightning_ips']:8.1f} images/s   ratio (Lightning time / plain time) {row['ratio']:.3f}   "
                f"overhead {row['overhead_ms']:+.2f} ms/step{flop}{mfu}",
                flush=True,
            )
    return rows


if __name__ == "__main__":
    sys.exit(main() and 0)
