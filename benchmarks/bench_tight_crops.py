"""MTCNN on faces that fill the photo: landmarks on tight crops of real photos against those of the whole photo.

    python benchmarks/bench_tight_crops.py PHOTOS [--count 200] [--seed 0] [--pad 0.5]
    python benchmarks/bench_tight_crops.py lfw/images_deepfunneled        # LFW's deep-funneled photos

1. `--count` photos drawn from PHOTOS (searched recursively; LFW's `<Name>/<Name>_NNNN.jpg` or any folder of
   photos centred on one person); the plain cascade's landmarks of the face nearest each whole photo's centre
   are the reference.
2. Each photo cut to the box of those 5 landmarks grown on each side by a random 10-30% of the box (`tight`:
   the face fills the crop and its forehead and chin are cut by the crop's edge), and by 100-150% (`loose`:
   a face photo with some background, the floor of what re-detection on a crop can do).
3. The crops detected again, before (`--pad 0`: the plain cascade) and after (the detector's second search
   inside a grey border of `--pad` times the longer side, the default): the share of crops with a face, the
   landmark error of the face nearest the reference, mean distance over the 5 points in the original photo's
   pixels divided by the reference inter-ocular distance (mean, median, share over 0.1), how often that face is
   the largest (the face `elasticface-align` keeps by default), and the time per crop. The whole photos are
   detected again too: loose photos keep their landmarks and their time.

Prints the figures and the after/before ratios measured in this run.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from elasticface.align.detector import PAD, Face, MTCNNDetector
from elasticface.align.folder import list_photos, pick_face
from elasticface.align.photos import read_photo

TIERS = {"tight": (0.1, 0.3), "loose": (1.0, 1.5)}


def crop(photo: np.ndarray, landmarks: np.ndarray, grow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The photo cut to the landmarks' box grown by `grow` (left, top, right, bottom; fractions of the box), and
    the crop's corner in the photo."""
    lo, hi = landmarks.min(0), landmarks.max(0)
    size = hi - lo
    x0, y0 = np.floor(lo - grow[:2] * size).astype(int).clip(0)
    x1, y1 = np.ceil(hi + grow[2:] * size).astype(int)
    x1, y1 = min(x1, photo.shape[1]), min(y1, photo.shape[0])
    return np.ascontiguousarray(photo[y0:y1, x0:x1]), np.array([x0, y0], dtype=np.float64)


def measure(detector: MTCNNDetector, photos: list[np.ndarray], corners: list[np.ndarray],
            reference: list[np.ndarray], batch: int) -> dict[str, float]:
    start = time.perf_counter()
    found: list[list[Face]] = []
    for i in range(0, len(photos), batch):
        found += detector.detect(photos[i:i + batch])
    seconds = time.perf_counter() - start
    errors, largest = [], 0
    for faces, corner, ref, photo in zip(found, corners, reference, photos):
        if not faces:
            continue
        iod = float(np.linalg.norm(ref[1] - ref[0]))
        distance = [float(np.linalg.norm(f.landmarks + corner - ref, axis=1).mean()) / iod for f in faces]
        errors.append(min(distance))
        largest += faces[int(np.argmin(distance))] is pick_face(faces, photo.shape[1::-1], "largest")
    err = np.array(errors) if errors else np.array([np.nan])
    return {"found": len(errors) / len(photos), "err_mean": float(err.mean()), "err_median": float(np.median(err)),
            "over_0.1": float((err > 0.1).mean()), "largest": largest / max(len(errors), 1),
            "ms": seconds / len(photos) * 1e3}


def row(name: str, m: dict[str, float]) -> str:
    return (f"  {name:<8} found {m['found']:6.1%}  error/IOD mean {m['err_mean']:.4f} median {m['err_median']:.4f} "
            f"over 0.1 {m['over_0.1']:6.1%}  largest {m['largest']:6.1%}  {m['ms']:6.1f} ms/photo")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("photos", help="folder of one-face photos, e.g. LFW's images_deepfunneled/")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pad", type=float, default=PAD, help="the border of the second search (after)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-face-size", type=int, default=20)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    names = list_photos(args.photos)
    chosen = sorted(rng.choice(len(names), min(args.count, len(names)), replace=False))
    photos = [read_photo(os.path.join(args.photos, names[i])) for i in chosen]
    before = MTCNNDetector(min_face_size=args.min_face_size, pad=0.0)
    after = MTCNNDetector(min_face_size=args.min_face_size, pad=args.pad)

    reference_faces: list[list[Face]] = []
    for i in range(0, len(photos), args.batch):
        reference_faces += before.detect(photos[i:i + args.batch])
    kept = [(p, pick_face(f, p.shape[1::-1], "center")) for p, f in zip(photos, reference_faces) if f]
    print(f"{len(photos)} photos from {args.photos}: a face in {len(kept)} (the reference landmarks)")
    photos, reference = [p for p, _ in kept], [f.landmarks for _, f in kept]
    whole = [np.zeros(2)] * len(photos)
    print("whole photos")
    base = measure(before, photos, whole, reference, args.batch)
    new = measure(after, photos, whole, reference, args.batch)
    print(row("before", base) + "\n" + row("after", new) + f"\n  after/before time {new['ms'] / base['ms']:.2f}")
    for tier, (low, high) in TIERS.items():
        crops, corners = zip(*(crop(p, ref, rng.uniform(low, high, 4)) for p, ref in zip(photos, reference)))
        sides = np.array([c.shape[:2] for c in crops])
        print(f"{tier} crops: landmarks' box + {low:.0%}-{high:.0%} a side, median {np.median(sides[:, 1]):.0f}x"
              f"{np.median(sides[:, 0]):.0f} px")
        base = measure(before, list(crops), list(corners), reference, args.batch)
        new = measure(after, list(crops), list(corners), reference, args.batch)
        print(row("before", base) + "\n" + row("after", new))
        print(f"  after/before: found {new['found'] / max(base['found'], 1e-9):.2f}x, mean error "
              f"{new['err_mean'] / base['err_mean']:.2f}x, time {new['ms'] / base['ms']:.2f}x")


if __name__ == "__main__":
    main()
