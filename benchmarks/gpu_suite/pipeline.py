"""The input pipeline of the GPU suite: how many images/s the machine's CPU cores (and its GPU JPEG decoder)
turn from a RecordIO file into training batches, to set against what the model consumes.

The RecordIO is written at run time with the project's own writer (elasticface.data.convert.write_recordio,
behind `elasticface-convert`), from bench_data.py's smooth random 112x112 faces (JPEG quality 95).
- CPU workers: the training loader itself (FaceDataModule.train_dataloader: StatefulDataLoader, workers
  decoding with torchvision), each batch moved to the device and flipped and scaled there, as the
  DataModule does after transfer; passes after the first (which starts the workers) are timed.
- GPU decoder: torchvision.io.decode_jpeg(device="cuda") on batches of the same JPEG bytes held in memory,
  then the same flip and scaling.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from bench_data import build_rec, smooth_faces
from gpu_suite.measure import sync


@dataclass
class PipelineResult:
    images: int
    cpu_workers: int
    cpu_images_per_s: float
    gpu_images_per_s: float | None
    gpu_note: str = ""


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


def measure(root: str, images: int, workers: int, batch: int, passes: int, device: str) -> PipelineResult:
    from elasticface.data.datamodule import FaceDataModule
    from elasticface.data.recordio_dataset import RecordIODataset
    from elasticface.data.transforms import normalize, random_hflip

    build_rec(root, smooth_faces(images), num_classes=max(images // 16, 1))
    rec = os.path.join(root, "rec")
    batch = min(batch, images)
    dm = FaceDataModule(train_dataset=lambda: RecordIODataset(rec, decoder="torchvision"), batch_size=batch,
                        num_workers=workers, persistent_workers=workers > 0, pin_memory=True)
    dm.setup("fit")
    loader = dm.train_dataloader()

    def one_pass(batches) -> int:
        n = 0
        for images_u8, *_ in batches:
            x = normalize(random_hflip(images_u8.to(device, non_blocking=True)))
            n += x.shape[0]
        return n

    one_pass(loader)  # starts the workers
    sync(device)
    t0 = time.perf_counter()
    done = sum(one_pass(loader) for _ in range(passes))
    sync(device)
    cpu_rate = done / (time.perf_counter() - t0)
    del loader  # stops the persistent workers before the temporary files go

    gpu_rate, note = None, ""
    if device != "cuda":
        note = "no GPU"
    else:
        try:
            gpu_rate = gpu_decode_rate(RecordIODataset(rec), batch, passes)
        except (RuntimeError, TypeError) as exc:  # a torchvision built without nvjpeg
            note = f"torchvision.io.decode_jpeg(device='cuda') failed: {str(exc).splitlines()[0][:160]}"
    return PipelineResult(images, workers, cpu_rate, gpu_rate, note)


def gpu_decode_rate(dataset, batch: int, passes: int) -> float:
    from torchvision.io import ImageReadMode, decode_jpeg

    from elasticface.data.transforms import normalize, random_hflip

    raw = [torch.frombuffer(bytearray(dataset.read_raw(i)[0]), dtype=torch.uint8) for i in range(len(dataset))]
    chunks = [raw[i:i + batch] for i in range(0, len(raw) - batch + 1, batch)]

    def one_pass() -> int:
        n = 0
        for chunk in chunks:
            x = torch.stack(decode_jpeg(chunk, mode=ImageReadMode.RGB, device="cuda"))
            n += normalize(random_hflip(x)).shape[0]
        return n

    one_pass()
    sync("cuda")
    t0 = time.perf_counter()
    done = sum(one_pass() for _ in range(passes))
    sync("cuda")
    return done / (time.perf_counter() - t0)


def part(args, rows: list[dict]) -> dict:
    """The pipeline's images/s against the fastest template row's, printed."""
    import tempfile

    from gpu_suite.printing import say

    say()
    workers = args.workers if args.workers is not None else cores()
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(tmp, args.pipeline_images, workers, max(args.batches), args.passes,
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
