"""Faces stored as image files: training faces one sub-folder per identity (`root/<identity>/<image>`),
and unlabelled faces anywhere under a folder (`ImageFiles`, what `eval.embed` embeds and MegaFace reads).

Sorted sub-folder names give labels 0..C-1, so the same folder always maps to the same classes (and
`convert.recordio_to_folder` writes zero-padded names that sort back into the original labels).
Several roots of the same people (a person's sharp photos in one, the same photos degraded by
`elasticface-convert lowres` in another) train as one set: each person is one class, their images from every root.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from elasticface.data.decode import CorruptImageError, DecodeStats, check_max_pixels, decode_image, resize_uint8
from elasticface.data.faults import DroppedRecord
from elasticface.data.pairs import PairSet
from elasticface.utils.errors import BadValue, MissingPath

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
LAYOUT = "expected {root}/<identity>/<image>{ext}: one sub-folder of images per identity"


def scan_image_folder(
    root: str, extensions: Sequence[str] = IMAGE_EXTENSIONS
) -> tuple[list[str], list[str], np.ndarray]:
    """(class names, image paths, labels) of an identity-per-folder tree; errors name what was expected."""
    exts = tuple(e.lower() for e in extensions)
    layout = LAYOUT.format(root=root, ext=f" ({', '.join(exts)})")
    if not os.path.isdir(root):
        raise MissingPath(f"image folder {root} not found; {layout}")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise BadValue(f"image folder {root} has no identity sub-folders; {layout}")
    paths: list[str] = []
    labels: list[int] = []
    empty: list[str] = []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        files = sorted(e.name for e in os.scandir(folder) if e.is_file() and e.name.lower().endswith(exts))
        if not files:
            empty.append(name)
        paths.extend(os.path.join(folder, f) for f in files)
        labels.extend([label] * len(files))
    if not paths:
        raise BadValue(f"image folder {root} has {len(classes)} identity folders but no images; {layout}")
    if empty:
        log.warning(
            "%s: %d identity folder(s) hold no images (e.g. %s); their labels stay reserved",
            root,
            len(empty),
            ", ".join(empty[:5]),
        )
    return classes, paths, np.asarray(labels, dtype=np.int64)


def scan_image_folders(
    roots: Sequence[str], extensions: Sequence[str] = IMAGE_EXTENSIONS
) -> tuple[list[str], list[str], np.ndarray]:
    """`scan_image_folder` over roots that hold the same people: a person's images from the first root, then
    from the next; roots whose identity folders differ are an error naming the people one of them lacks."""
    scans = [scan_image_folder(root, extensions) for root in roots]
    if len(scans) == 1:
        return scans[0]
    classes = scans[0][0]
    for root, (other, _, _) in zip(roots[1:], scans[1:]):
        if other != classes:
            lacking = sorted(set(classes) ^ set(other))
            raise BadValue(
                f"image folders {roots[0]} and {root} must hold the same people (one identity folder each, the "
                f"same names), but {len(lacking)} are in only one of them ({', '.join(lacking[:5])}"
                f"{', ...' if len(lacking) > 5 else ''}); give data.train_dataset.root one folder, or folders of "
                "the same people")
    paths = [path for _, root_paths, _ in scans for path in root_paths]
    labels = np.concatenate([root_labels for _, _, root_labels in scans])
    order = np.argsort(labels, kind="stable")  # person by person, each person's roots in the order given
    return classes, [paths[i] for i in order], labels[order]


class ImageFolderFaces(Dataset):
    """Training faces from `root/<identity>/<image>`, or from a list of such roots that hold the same people;
    item = (uint8 [3, S, S] RGB tensor, label).

    Any format PIL reads; grey becomes RGB; other sizes are resized and counted (`stats.resized`).
    An unreadable file yields a `DroppedRecord`; the training loop counts each once over the whole run and
    stops past `max_corrupt`. A `FaceDataset` (`elasticface.data.face_dataset`).
    """

    def __init__(
        self,
        root: str | Sequence[str],
        max_corrupt: int = 10,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        num_classes: int | None = None,
        decoder: str = "torchvision",
        image_size: int = 112,
        max_pixels: int | None = None,
    ) -> None:
        self.roots = [str(root)] if isinstance(root, (str, os.PathLike)) else [str(r) for r in root]
        if not self.roots:
            raise BadValue("data.train_dataset.root=[]: expected an image folder or a list of them")
        self.root = " + ".join(self.roots)
        self.max_pixels = check_max_pixels(max_pixels)
        self.classes, self.paths, self.labels = scan_image_folders(self.roots, extensions)
        self.num_classes = len(self.classes)
        if num_classes is not None and int(num_classes) != self.num_classes:
            raise BadValue(
                f"num_classes={num_classes} was requested but {self.root} has {self.num_classes} identity folders"
            )
        self.max_corrupt = int(max_corrupt)
        self.decoder = decoder
        self.image_size = image_size
        self.stats = DecodeStats()
        self.corrupt_paths: list[str] = []  # distinct unreadable images met in this process
        self.dropped_at_scan: tuple[DroppedRecord, ...] = ()  # the scan lists files, it decodes none

    @property
    def num_corrupt(self) -> int:
        return len(self.corrupt_paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | DroppedRecord:
        path = self.paths[index]
        try:
            with open(path, "rb") as f:
                data = f.read()
            img = decode_image(data, self.decoder, self.image_size, self.stats, self.max_pixels)
        except (OSError, CorruptImageError) as exc:
            if path not in self.corrupt_paths:
                self.corrupt_paths.append(path)
            # counted once per image over the whole run, all workers, by the DataModule's FaultLedger
            root = next(r for r in self.roots if path.startswith(os.path.join(r, "")))
            return DroppedRecord(root, os.path.relpath(path, root), str(exc))
        return img, int(self.labels[index])

    def __repr__(self) -> str:
        return f"ImageFolderFaces(root={self.root!r}, images={len(self)}, classes={self.num_classes})"


def list_images(root: str, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> list[str]:
    """Image files anywhere under `root`, as sorted paths relative to it."""
    if not os.path.isdir(root):
        raise MissingPath(f"image folder {root} is not a directory")
    exts = tuple(e.lower() for e in extensions)
    found = [
        os.path.relpath(os.path.join(dirpath, f), root)
        for dirpath, _, files in os.walk(root)
        for f in files
        if f.lower().endswith(exts)
    ]
    if not found:
        raise MissingPath(f"no images ({', '.join(exts)}) under {root}")
    return sorted(found)


class ImageFiles(Dataset):
    """Item i: (uint8 [3, S, S] RGB of `root/paths[i]`, i): aligned faces to embed, no labels.

    Faces of another size are an error (they were probably not aligned), or resized with `resize=True`. With
    `skip_unreadable` (MegaFace's million distractors) an unreadable file is item (zeros, -1 - i), so that one bad
    image is counted and skipped instead of stopping the run, and faces of another size are resized and counted
    (a log line at the 1st, 2nd, 4th ... time, one count per dataset: per worker).
    """

    def __init__(self, root: str, paths: Sequence[str], image_size: int = 112, resize: bool = False,
                 max_pixels: int | None = None, skip_unreadable: bool = False) -> None:
        self.root, self.paths, self.image_size, self.resize = root, list(paths), image_size, resize
        self.max_pixels = check_max_pixels(max_pixels)
        self.skip_unreadable = skip_unreadable
        self.stats = DecodeStats()

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = os.path.join(self.root, self.paths[index])
        if self.skip_unreadable:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                return decode_image(data, image_size=self.image_size, stats=self.stats,
                                    max_pixels=self.max_pixels), index
            except (OSError, CorruptImageError):
                return torch.zeros(3, self.image_size, self.image_size, dtype=torch.uint8), -1 - index
        with open(path, "rb") as f:
            data = f.read()
        try:
            img = decode_image(data, image_size=None, max_pixels=self.max_pixels)
        except CorruptImageError as exc:
            raise type(exc)(f"{path}: {exc}") from exc
        if img.shape[1:] != (self.image_size, self.image_size):
            if not self.resize:
                raise BadValue(
                    f"{path}: image is {img.shape[2]}x{img.shape[1]}; expected aligned "
                    f"{self.image_size}x{self.image_size} faces (pass --resize to resize)"
                )
            img = resize_uint8(img, self.image_size)
        return img, index


def folder_val_sets(
    pairs_file: str | None = None, image_root: str | None = None, name: str = "pairs", image_size: int = 112
) -> dict[str, PairSet]:
    """Validation sets for a folder dataset: {} without a pairs file, else one set from the pair list."""
    if not pairs_file:
        return {}
    from elasticface.data.pair_files import pairs_from_list

    root = image_root if image_root else os.path.dirname(os.path.abspath(pairs_file))
    return {name: pairs_from_list(pairs_file, root, name, image_size=image_size)}
