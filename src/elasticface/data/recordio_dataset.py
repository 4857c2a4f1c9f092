"""Training faces from insightface RecordIO (`train.rec`, `train.idx`, `property`): the Dataset.

The format itself (framing, index, IfQQ header) is `elasticface.data.recordio`.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch
from torch.utils.data import Dataset

from elasticface.data.decode import CorruptImageError, DecodeStats, check_max_pixels, decode_image
from elasticface.data.faults import DroppedRecord
from elasticface.data.recordio import (
    LAYOUT,
    CorruptRecordError,
    IndexedRecordFile,
    IRHeader,
    label_to_int,
    unpack_header,
)
from elasticface.utils.errors import BadFile, BadValue, MissingPath

log = logging.getLogger(__name__)


class CorruptRecordFile(BadFile, RuntimeError):
    """More records than `max_corrupt` found bad while scanning the index and headers: the file is damaged, or not
    insightface's RecordIO."""


class RecordIODataset(Dataset):
    """Training faces from `root/train.rec` + `train.idx` (+ `property`); item = (uint8 [3, S, S], label).

    Labels of every sample are known up front (`labels`) from the identity-range records of the legacy
    layout, or else from the record headers alone (24 bytes each, never the images). A record found bad
    while scanning is dropped and counted (more than `max_corrupt` raises); one that fails when read
    yields a `DroppedRecord`, which the training loop counts once per record over the whole run.
    A `FaceDataset` (`elasticface.data.face_dataset`).
    """

    def __init__(
        self,
        root: str,
        max_corrupt: int = 10,
        num_classes: int | None = None,
        decoder: str = "torchvision",
        image_size: int = 112,
        prefix: str = "train",
        max_pixels: int | None = None,
    ) -> None:
        self.root = str(root)
        self.max_pixels = check_max_pixels(max_pixels)
        self.rec_path = os.path.join(self.root, f"{prefix}.rec")
        self.idx_path = os.path.join(self.root, f"{prefix}.idx")
        self.property_path = os.path.join(self.root, "property")
        if not os.path.isdir(self.root):
            raise MissingPath(f"RecordIO root {self.root} is not a directory; " + LAYOUT.format(root=self.root))
        self.max_corrupt = int(max_corrupt)
        self.decoder = decoder
        self.image_size = image_size
        self.stats = DecodeStats()
        self.corrupt_keys: list[int] = []  # distinct keys found bad in this process
        self.dropped_at_scan: list[DroppedRecord] = []  # those found while scanning the index and headers
        self.records = IndexedRecordFile(self.rec_path, self.idx_path)

        self.layout, self.image_keys, labels, header_classes = self._scan()
        prop_classes = self._read_property()
        found = [(n, src) for n, src in ((prop_classes, self.property_path),
                                         (header_classes, f"{self.rec_path} header record")) if n is not None]
        if len(found) == 2 and found[0][0] != found[1][0]:
            raise BadFile(f"{found[0][1]} says {found[0][0]} classes but {found[1][1]} says {found[1][0]}")
        if found:
            classes = found[0][0]
        else:
            classes = self._classes_from_labels(labels, num_classes)
        if num_classes is not None and int(num_classes) != classes:
            raise BadValue(f"num_classes={num_classes} was requested but {self.root} has {classes} classes")
        self.num_classes = int(classes)

        bad = (labels < 0) | (labels >= self.num_classes)
        for key, lab in zip(self.image_keys[bad].tolist(), labels[bad].tolist()):
            self._corrupt(key, f"label {lab} outside [0, {self.num_classes})")
        self.image_keys = self.image_keys[~bad]
        self.labels = labels[~bad].astype(np.int64)
        if self.image_keys.size == 0:
            raise BadFile(f"{self.rec_path} holds no readable images; " + LAYOUT.format(root=self.root))

    # -- construction helpers ----------------------------------------------------------------------

    @property
    def num_corrupt(self) -> int:
        return len(self.corrupt_keys)

    def _classes_from_labels(self, labels: np.ndarray, requested: int | None) -> int:
        """No `property` file and no header record: the labels are all there is, so they must be 0..C-1."""
        if requested is not None:
            return int(requested)  # records with labels outside [0, num_classes) are dropped below
        if not labels.size:
            return 0
        present = np.unique(labels[labels >= 0])
        classes = int(present[-1]) + 1 if present.size else 0
        if present.size != classes:
            largest = ", ".join(str(v) for v in present[-3:][::-1])
            raise BadFile(
                f"{self.rec_path}: no {self.property_path} and no header record, so the number of classes would "
                f"come from the labels, but they are not 0..C-1: {present.size} distinct labels up to {classes - 1} "
                f"(largest: {largest}). Write {self.property_path} as 'num_classes,112,112' or set data.num_classes; "
                "records with labels outside [0, num_classes) are then skipped and counted.")
        log.info("%s: no property file; %d classes taken from the labels 0..%d", self.rec_path, classes, classes - 1)
        return classes

    def _read_property(self) -> int | None:
        if not os.path.isfile(self.property_path):
            return None
        with open(self.property_path, "rb") as f:
            raw = f.readline(256)
        try:
            first = raw.decode("ascii").strip()
            return int(first.split(",")[0])
        except (UnicodeDecodeError, ValueError):
            raise BadFile(f"{self.property_path}: expected a text line 'num_classes,height,width' "
                             f"(e.g. '85742,112,112'), got {raw[:40]!r}") from None

    def _scan(self) -> tuple[str, np.ndarray, np.ndarray, int | None]:
        rec = self.records
        if rec.keys.size == 0:
            raise BadFile(f"{self.idx_path} is empty; " + LAYOUT.format(root=self.root))
        first = int(rec.keys.min())
        head0: IRHeader | None = None
        try:
            payload = rec.read(first)
            head0, rest = unpack_header(payload)
            if not (head0.flag == 2 and len(rest) == 0):
                head0 = None
        except CorruptRecordError as exc:
            log.warning("%s: cannot read record %d (%s); assuming the im2rec layout", self.rec_path, first, exc)
        if head0 is not None and first == 0:
            return self._scan_legacy(head0)
        keys = np.asarray(sorted(rec.keys.tolist()), dtype=np.int64)
        return ("im2rec", *self._labels_from_headers(keys), None)

    def _scan_legacy(self, head0: IRHeader) -> tuple[str, np.ndarray, np.ndarray, int | None]:
        lo, hi = (float(v) for v in head0.label)
        n_keys = int(self.records.keys.size)
        # the header is read from the file: its image count must fit the index before it sizes anything
        if not (np.isfinite(hi) and 1 <= lo <= n_keys and lo <= hi):
            raise BadFile(f"{self.rec_path}: header record label [{lo:g}, {hi:g}] is not a valid [N+1, N+1+C] for "
                          f"an index of {n_keys} keys")
        lo, hi = int(round(lo)), int(round(hi))
        n_images, n_classes = lo - 1, hi - lo
        keys = np.arange(1, n_images + 1, dtype=np.int64)
        present = np.isin(keys, self.records.keys)
        missing = keys[~present].tolist()
        if missing:
            raise BadFile(f"{self.idx_path} lacks {len(missing)} of the image keys 1..{n_images} announced by "
                             f"the header record (first missing: {missing[:5]})")
        labels = self._labels_from_ranges(lo, hi, n_images)
        if labels is None:
            keys, labels = self._labels_from_headers(keys)
        return "legacy", keys, labels, n_classes

    def _labels_from_ranges(self, lo: int, hi: int, n_images: int) -> np.ndarray | None:
        labels = np.full(n_images, -1, dtype=np.int64)
        for c, key in enumerate(range(lo, hi)):
            try:
                head, _ = unpack_header(self.records.read(key))
                start, end = (int(round(float(v))) for v in np.asarray(head.label).ravel()[:2])
            except (KeyError, CorruptRecordError, ValueError, TypeError) as exc:
                log.warning("%s: identity-range record %d unreadable (%s); reading labels from image headers",
                            self.rec_path, key, exc)
                return None
            if not (1 <= start <= end <= n_images + 1):
                log.warning("%s: identity %d has range [%d, %d) outside 1..%d; reading labels from image headers",
                            self.rec_path, c, start, end, n_images)
                return None
            labels[start - 1:end - 1] = c
        if (labels < 0).any():
            log.warning("%s: identity ranges leave %d images unassigned; reading labels from image headers",
                        self.rec_path, int((labels < 0).sum()))
            return None
        return labels

    def _labels_from_headers(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        labels = np.empty(keys.size, dtype=np.int64)
        ok = np.ones(keys.size, dtype=bool)
        for i, key in enumerate(keys.tolist()):
            try:
                labels[i] = label_to_int(self.records.read_header(key).label)
            except CorruptRecordError as exc:
                ok[i] = False
                self._corrupt(key, str(exc))
        return keys[ok], labels[ok]

    # -- access --------------------------------------------------------------------------------------

    def _corrupt(self, key: int, reason: str) -> None:
        if int(key) in self.corrupt_keys:
            return
        self.corrupt_keys.append(int(key))
        self.dropped_at_scan.append(DroppedRecord(self.rec_path, str(key), f"{reason} (found scanning the index)"))
        log.warning("%s: skipping corrupt record key %d: %s (%d skipped in this process, limit %d)",
                    self.rec_path, key, reason, self.num_corrupt, self.max_corrupt)
        if self.num_corrupt > self.max_corrupt:
            raise CorruptRecordFile(f"{self.rec_path}: {self.num_corrupt} corrupt records (limit max_corrupt="
                                    f"{self.max_corrupt}); last was key {key}: {reason}. The file is damaged or not "
                                    "in the insightface RecordIO format.")

    def __len__(self) -> int:
        return int(self.image_keys.size)

    def read_raw(self, index: int) -> tuple[bytes, int]:
        """Encoded image bytes and label of sample `index` (raises CorruptRecordError)."""
        key = int(self.image_keys[index])
        head, image = unpack_header(self.records.read(key))
        return image, label_to_int(head.label)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | DroppedRecord:
        key = int(self.image_keys[index])
        try:
            image, label = self.read_raw(index)
            if not 0 <= label < self.num_classes:
                raise CorruptRecordError(f"label {label} outside [0, {self.num_classes})")
            if label != self.labels[index]:
                raise CorruptRecordError(
                    f"header label {label} disagrees with the identity ranges ({self.labels[index]})"
                )
            img = decode_image(image, self.decoder, self.image_size, self.stats, self.max_pixels)
        except (CorruptRecordError, CorruptImageError) as exc:
            if key not in self.corrupt_keys:
                self.corrupt_keys.append(key)
            return DroppedRecord(self.rec_path, str(key), str(exc))
        return img, label

    def __repr__(self) -> str:
        return (
            f"RecordIODataset(root={self.root!r}, layout={self.layout}, images={len(self)}, "
            f"classes={self.num_classes}, decoder={self.decoder})"
        )
