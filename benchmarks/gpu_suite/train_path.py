"""The path users run, against the GPU suite's row of the same size: `python train.py trainer=gpu backbone=iresnet100
data=recordio` on a RecordIO written on the machine by `elasticface-convert`, validated and checkpointed each epoch.

    bash benchmarks/gpu_suite/run.sh train-path --suite-json suite.json            (a GPU: iresnet100, batch 256)
    bash benchmarks/gpu_suite/run.sh train-path --device cpu --backbone tiny ...   (tiny sizes: the tests run this)

The faces are bench_data.py's smooth random 112x112 JPEGs, one folder per identity (16 images each by default),
turned into train.rec/.idx/property by `elasticface-convert folder2rec`. A verification set of other identities
goes beside them as val.bin (`elasticface-convert pairs2bin`), which data=recordio finds there. The suite row to
compare with has the same backbone, batch and class count (`run.sh --full-classes <identities>`). train.py
runs as typed, plus the batch, the epochs, a checkpoint each epoch and the run folder. From its summary.json:
images/s (the first step, compilation and autotuning, apart), each epoch's images/s, whether every training step
ran the compiled backbone (counted), and the ratio to the suite row's images/s. Goals (issue 61): >= 0.9x the
row, every epoch after the first within 5% of the others (a run that falls back to eager after its first
validation shows here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RATIO_GOAL = 0.9
EPOCH_SPREAD_GOAL = 0.05


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_suite train-path", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--backbone", default="iresnet100")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps-per-epoch", type=int, default=50)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--identities", type=int, default=None,
                   help="training identities, the class layer's classes (default: images / 16)")
    p.add_argument("--val-identities", type=int, default=100)
    p.add_argument("--suite-json", default=None, help="the GPU suite's --json file: the row to compare with")
    p.add_argument("--work", default="gpu_train_path", help="where the faces, the RecordIO and the run go")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("overrides", nargs="*", help="more train.py overrides (after the script's own)")
    return p.parse_args(argv)


def say(line: str = "") -> None:
    print(line, flush=True)


def write_faces(folder: Path, images: int, identities: int, seed: int) -> list[list[Path]]:
    """`images` JPEGs spread over `identities` sub-folders; the files of each identity."""
    from bench_data import smooth_faces

    files: list[list[Path]] = [[] for _ in range(identities)]
    for i, data in enumerate(smooth_faces(images, seed=seed)):
        who = i % identities
        path = folder / f"{who:06d}" / f"{i:07d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[who].append(path)
    return files


def write_pairs(path: Path, files: list[list[Path]], root: Path) -> None:
    """Matched pairs (two photos of one identity) and mismatched ones, alternating in blocks of ten per fold."""
    matched = [(f[0], f[1]) for f in files if len(f) >= 2]
    mismatched = [(files[i][0], files[(i + 1) % len(files)][0]) for i in range(len(files))]
    n = min(len(matched), len(mismatched)) // 10 * 10
    lines = [f"{a.relative_to(root)} {b.relative_to(root)} {same}" for pairs, same in ((matched, 1), (mismatched, 0))
             for a, b in pairs[:n]]
    path.write_text("\n".join(lines) + "\n")


def command(*args: str) -> None:
    say("$ " + " ".join(args))
    subprocess.run(list(args), check=True)


def identities(args) -> int:
    return args.identities or max(args.batch * args.steps_per_epoch // 16, 2)


def convert() -> list[str]:
    """`elasticface-convert` as installed beside this Python, else its module (a checkout on PYTHONPATH only, as on
    the device machines)."""
    script = Path(sys.executable).parent / "elasticface-convert"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "elasticface.cli.convert"]


def build_data(args, work: Path) -> Path:
    """train.rec/.idx/property and val.bin in `work/rec`."""
    rec = work / "rec"
    if (rec / "val.bin").is_file():
        return rec
    write_faces(work / "faces", args.batch * args.steps_per_epoch, identities(args), seed=0)
    val = write_faces(work / "val_faces", 2 * args.val_identities, args.val_identities, seed=1)
    command(*convert(), "folder2rec", str(work / "faces"), str(rec))
    write_pairs(work / "val_pairs.txt", val, work / "val_faces")
    command(*convert(), "pairs2bin", str(work / "val_pairs.txt"), str(work / "val_faces"), str(rec / "val.bin"))
    return rec


def suite_row(path: str | None, args) -> dict | None:
    """The suite's template row of the same backbone, batch and full class layer."""
    if not path:
        return None
    rows = json.loads(Path(path).read_text())["rows"]
    return next((r for r in rows if r["backbone"] == args.backbone and r["batch"] == args.batch
                 and r["classes"] == identities(args) and r["class_layer"].startswith("full") and r["template"]), None)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work).resolve()
    t = time.perf_counter()
    rec = build_data(args, work)
    say(f"data: {rec} ({time.perf_counter() - t:.0f} s)")
    run_dir = work / f"run_{time.strftime('%Y%m%d_%H%M%S')}"
    typed = [f"trainer={'gpu' if args.device == 'cuda' else 'cpu'}", f"backbone={args.backbone}", "data=recordio",
             f"data.root={rec}", f"data.batch_size={args.batch}", f"trainer.max_epochs={args.epochs}",
             f"checkpoint.every_n_steps={args.steps_per_epoch}",
             f"hydra.run.dir={run_dir}", *args.overrides]
    t = time.perf_counter()
    command(sys.executable, str(ROOT / "train.py"), *typed)
    wall = time.perf_counter() - t
    summary = json.loads((run_dir / "summary.json").read_text())
    epochs = summary["images_per_second_per_epoch"]
    later = epochs[1:]
    spread = max(later) / min(later) - 1 if len(later) >= 2 else None
    row = suite_row(args.suite_json, args)
    ratio = summary["images_per_second"] / row["template"]["images_per_s"] if row else None
    result = {"command": "python train.py " + " ".join(typed), "wall_seconds": wall,
              "images_per_second": summary["images_per_second"], "images_per_second_per_epoch": epochs,
              "first_step_seconds": summary["first_step_seconds"], "compiled": summary["compiled"],
              "compiled_steps": summary["compiled_steps"], "global_step": summary["global_step"],
              "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt")),
              "suite_images_per_second": row["template"]["images_per_s"] if row else None, "ratio": ratio,
              "epoch_spread_after_first": spread}
    say(f"train.py: {summary['global_step']} steps in {wall:.0f} s; first step {summary['first_step_seconds']:.1f} s "
        f"(compilation, autotuning); images/s {summary['images_per_second']:,.1f}, per epoch "
        f"{', '.join(f'{x:,.1f}' for x in epochs)}; compiled {summary['compiled']} {summary['compiled_steps']}; "
        f"checkpoints {', '.join(result['checkpoints'])}")
    if ratio is not None:
        say(f"  against the suite's row ({row['template']['images_per_s']:,.1f} images/s): {ratio:.3f}x "
            f"{'yes' if ratio >= RATIO_GOAL else 'NO'} (goal >= {RATIO_GOAL})")
    if spread is not None:
        say(f"  epochs after the first: largest / smallest - 1 = {100 * spread:.1f}% "
            f"{'yes' if spread <= EPOCH_SPREAD_GOAL else 'NO'} (goal <= {100 * EPOCH_SPREAD_GOAL:.0f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    main()
