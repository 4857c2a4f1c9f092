"""Converters between face data formats: image folder <-> RecordIO, pairs list -> .bin, a lost index rebuilt.

The command is `elasticface-convert` (`elasticface.cli.convert`); `python -m elasticface.data.convert` still runs it.

RecordIO is written in the legacy insightface layout (header key 0, images 1..N, identity ranges
N+1..N+C, `property`), so insightface's and MXNet's readers open it too. JPEGs that are already
112x112 are stored byte for byte; anything else is decoded, made RGB, resized and re-encoded.

Outputs that exist are refused unless `overwrite` (the command's `--overwrite`): a folder that holds entries
(rec2folder), the files a conversion writes (folder2rec's `.rec`, `.idx` and `property`, which may sit beside
`.bin` benchmarks; pairs2bin's `.bin`). The RecordIO set is written under temporary names and renamed when whole.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np

from elasticface.data.decode import (MAX_PIXELS, CorruptImageError, ImageTooLargeError, decode_image, encode_jpeg,
                                     image_format, open_header)
from elasticface.data.folder import IMAGE_EXTENSIONS, scan_image_folder
from elasticface.data.recordio import CorruptRecordError, RecordIOWriter, pack_header, scan_records
from elasticface.data.recordio_dataset import RecordIODataset
from elasticface.utils.output_paths import atomic_path, inside, refuse_existing, refuse_existing_files
from elasticface.utils.errors import BadValue, MissingPath

log = logging.getLogger(__name__)

_FLOAT32_EXACT = 1 << 24


def prepare_image(data: bytes, image_size: int = 112, quality: int = 95,
                  max_pixels: int = MAX_PIXELS) -> tuple[bytes, bool]:
    """(JPEG bytes of an RGB image_size x image_size face, whether it had to be re-encoded); an image whose
    header declares more than max_pixels is refused before decoding."""
    try:
        with open_header(data, max_pixels) as img:
            if img.format == "JPEG" and img.size == (image_size, image_size) and img.mode in ("RGB", "L"):
                img.load()  # a full decode catches truncated files before they enter the dataset
                return data, False
    except ImageTooLargeError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises many types
        raise CorruptImageError(f"cannot decode image: {exc}") from exc
    tensor = decode_image(data, "pil", image_size, max_pixels=max_pixels)
    return encode_jpeg(tensor, quality), True


def write_recordio(image_root: str, out_dir: str, prefix: str = "train", image_size: int = 112, quality: int = 95,
                   extensions: Sequence[str] = IMAGE_EXTENSIONS, max_corrupt: int = 10,
                   overwrite: bool = False) -> dict[str, int]:
    """Image folder (one sub-folder per identity) -> legacy insightface RecordIO in `out_dir`; an existing
    `<prefix>.rec`, `.idx` or `property` there is refused unless `overwrite`."""
    rec_path = str(inside(out_dir, f"{prefix}.rec", "--prefix"))
    idx_path, property_path = os.path.splitext(rec_path)[0] + ".idx", os.path.join(out_dir, "property")
    refuse_existing_files([rec_path, idx_path, property_path], overwrite)
    classes, paths, labels = scan_image_folder(str(image_root), extensions)
    n, c = len(paths), len(classes)
    if n + c + 1 >= _FLOAT32_EXACT:
        raise BadValue(f"{image_root}: {n} images + {c} identities exceed 2^24, where the legacy layout's float32 "
                         "key ranges stop being exact; split the data into several .rec files")
    os.makedirs(out_dir, exist_ok=True)
    # under temporary names beside the outputs, renamed over them when whole (a killed run leaves no half .rec)
    with atomic_path(property_path) as tmp_property, atomic_path(idx_path) as tmp_idx, \
            atomic_path(rec_path) as tmp_rec:
        n, reencoded, skipped, split = _write_records(str(tmp_rec), str(tmp_idx), image_root, paths, labels, c,
                                                      image_size, quality, max_corrupt)
        with open(tmp_property, "w") as f:
            f.write(f"{c},{image_size},{image_size}\n")
    log.info(
        "wrote %s: %d images, %d identities (%d re-encoded, %d skipped, %d multi-chunk records)",
        rec_path,
        n,
        c,
        reencoded,
        skipped,
        split,
    )
    return {"images": n, "classes": c, "reencoded": reencoded, "skipped": skipped, "multi_chunk": split}


def _write_records(rec_path: str, idx_path: str, image_root: str, paths: Sequence[str], labels: np.ndarray, c: int,
                   image_size: int, quality: int, max_corrupt: int) -> tuple[int, int, int, int]:
    """`write_recordio`'s records into `rec_path` / `idx_path`: (images, re-encoded, skipped, multi-chunk)."""
    ranges = np.zeros((c, 2), dtype=np.int64)
    kept_labels: list[int] = []
    reencoded = skipped = 0
    with RecordIOWriter(rec_path, idx_path) as writer:
        # the header needs N, which is only final once unreadable files are dropped: write a placeholder
        # of the same size now and patch it in place at the end
        writer.write(0, pack_header([0.0, 0.0]))
        key = 1
        for path, label in zip(paths, labels.tolist()):
            with open(path, "rb") as f:
                data = f.read()
            try:
                jpeg, changed = prepare_image(data, image_size, quality)
            except CorruptImageError as exc:
                skipped += 1
                log.warning("skipping unreadable image %s: %s", path, exc)
                if skipped > max_corrupt:
                    raise RuntimeError(
                        f"{image_root}: more than max_corrupt={max_corrupt} unreadable images; last {path}"
                    ) from exc
                continue
            reencoded += changed
            writer.write_image(key, float(label), jpeg)
            kept_labels.append(label)
            key += 1
        n = key - 1
        lab = np.asarray(kept_labels, dtype=np.int64)
        starts = np.searchsorted(lab, np.arange(c), side="left") + 1
        ends = np.searchsorted(lab, np.arange(c), side="right") + 1
        ranges[:, 0], ranges[:, 1] = starts, ends
        for i in range(c):
            writer.write(n + 1 + i, pack_header([float(ranges[i, 0]), float(ranges[i, 1])], n + 1 + i))
        split = writer.num_split_records
    with open(rec_path, "r+b") as f:
        head = pack_header([float(n + 1), float(n + 1 + c)])
        f.seek(8)  # after magic + lrec of record 0 (whole record: 24 + 8 bytes, unchanged length)
        f.write(head)
        f.flush()
        os.fsync(f.fileno())
    return n, reencoded, skipped, split


def recordio_to_folder(rec_root: str, out_dir: str, prefix: str = "train", max_corrupt: int = 10,
                       overwrite: bool = False) -> dict[str, int]:
    """RecordIO -> `out_dir/<label>/<key>.<ext>` with the stored bytes copied unchanged (no re-encoding); an
    `out_dir` that holds entries is refused unless `overwrite`."""
    ds = RecordIODataset(rec_root, max_corrupt=max_corrupt, prefix=prefix)
    refuse_existing(out_dir, overwrite)
    width = max(len(str(ds.num_classes - 1)), 1)
    os.makedirs(out_dir, exist_ok=True)
    for c in range(ds.num_classes):  # every identity gets its folder, so sorted names == labels
        os.makedirs(os.path.join(out_dir, f"{c:0{width}d}"), exist_ok=True)
    written = 0
    for i in range(len(ds)):
        key = int(ds.image_keys[i])
        try:
            data, label = ds.read_raw(i)
            if not 0 <= label < ds.num_classes:
                raise CorruptRecordError(f"label {label} outside [0, {ds.num_classes})")
        except CorruptRecordError as exc:
            ds._corrupt(key, str(exc))
            continue
        with open(os.path.join(out_dir, f"{label:0{width}d}", f"{key}.{image_format(data)}"), "wb") as f:
            f.write(data)
        written += 1
    log.info(
        "wrote %d images of %d identities to %s (%d corrupt records skipped)",
        written,
        ds.num_classes,
        out_dir,
        ds.num_corrupt,
    )
    return {"images": written, "classes": ds.num_classes, "skipped": ds.num_corrupt}


def pairs_to_bin(
    pairs_file: str, image_root: str, out_path: str, image_size: int = 112, quality: int = 95,
    overwrite: bool = False,
) -> dict[str, int]:
    """A pair list (`path1 path2 0|1`, LFW's pairs.txt, CFP's protocol) -> insightface `.bin`; 112x112 JPEGs are
    stored byte for byte. A pair whose photo is missing is left out: one line names it, the count is returned
    and a warning says that the .bin is then not the benchmark's protocol. An existing `out_path` is refused
    unless `overwrite`."""
    from elasticface.data.pair_files import pairs_from_list, write_bin

    refuse_existing(out_path, overwrite)
    skipped: list[str] = []
    pairs = pairs_from_list(pairs_file, image_root, image_size=image_size, skipped=skipped)
    for line in skipped:
        log.warning("%s; pair left out", line)
    if skipped:
        total = pairs.num_pairs + len(skipped)
        log.warning("%d of the %d pairs of %s were LEFT OUT (their photos are missing, listed above): %s holds %d "
                    "pairs, not the protocol's %d, so its accuracies are not comparable with published ones",
                    len(skipped), total, pairs_file, out_path, pairs.num_pairs, total)
    images = []
    for i in range(len(pairs)):
        try:
            jpeg, _ = prepare_image(pairs.raw(i), image_size, quality)
        except CorruptImageError as exc:
            raise type(exc)(f"{pairs.images[i]}: {exc}") from exc
        images.append(jpeg)
    write_bin(out_path, images, pairs.issame.tolist())
    return {"pairs": pairs.num_pairs, "positives": int(pairs.issame.sum()), "skipped_pairs": len(skipped)}


def rebuild_index(rec_root: str, prefix: str = "train") -> int:
    """Write `prefix.idx` by scanning `prefix.rec`; keys are record ordinals (0, 1, 2, ...)."""
    rec_path = os.path.join(rec_root, f"{prefix}.rec")
    if not os.path.isfile(rec_path):
        raise MissingPath(f"{rec_path} not found")
    idx_path = os.path.join(rec_root, f"{prefix}.idx")
    count = 0
    with open(idx_path + ".tmp", "w") as f:
        for key, offset in scan_records(rec_path):
            f.write(f"{key}\t{offset}\n")
            count += 1
    os.replace(idx_path + ".tmp", idx_path)
    return count

