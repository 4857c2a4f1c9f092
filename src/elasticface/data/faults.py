"""Bad training records, counted once per run: the ledger behind `max_corrupt`.

A dataset that cannot read a record returns a `DroppedRecord` instead of a sample; the collate function
drops it and hands it to the training process, where `FaultLedger` counts DISTINCT (file, key) pairs
over the whole run: every worker process and every epoch read the same bad record again, and a count
of reads would stop a long run for one damaged JPEG. The ledger is part of the DataModule's checkpoint
state, so a resumed run keeps counting where it stopped. Under DDP each rank counts the records of its
own shard.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)

# BatchNorm in training mode needs more than one value per channel: a batch left with fewer images
# after dropping bad records is skipped (and counted), never handed to a layer that would crash on it.
MIN_TRAIN_BATCH = 2


def too_small_to_train(images: Any) -> bool:
    """Whether a training batch has too few images left to train on (the DataModule counts it, the module skips it)."""
    return images.shape[0] < MIN_TRAIN_BATCH


class DroppedRecord(NamedTuple):
    """What a training dataset returns for a record it cannot read (a tuple: Lightning moves batches
    with `apply_to_collection`, which refuses frozen dataclasses)."""

    source: str   # the file (.rec, image path) the record lives in
    key: str      # the record's key or index in that file
    reason: str


class TooManyCorruptRecords(RuntimeError):
    pass


class FaultLedger:
    def __init__(self, max_corrupt: int = 10) -> None:
        if max_corrupt < 0:
            raise BadValue(f"max_corrupt={max_corrupt}: must be >= 0")
        self.max_corrupt = int(max_corrupt)
        self.records: dict[tuple[str, str], str] = {}
        self.small_batches = 0

    @property
    def num_corrupt(self) -> int:
        return len(self.records)

    def add(self, dropped: list[DroppedRecord]) -> int:
        """Record what a batch dropped; returns how many of them were new. Raises past the limit."""
        new = 0
        for record in dropped:
            ident = (record.source, str(record.key))
            if ident not in self.records:
                self.records[ident] = record.reason
                new += 1
                log.warning("%s: skipping corrupt record %s: %s (%d distinct so far, limit max_corrupt=%d)",
                            record.source, record.key, record.reason, self.num_corrupt, self.max_corrupt)
        if self.num_corrupt > self.max_corrupt:
            raise TooManyCorruptRecords(self.describe())
        return new

    def describe(self, shown: int = 5) -> str:
        by_file: dict[str, list[str]] = {}
        for (source, key), _ in self.records.items():
            by_file.setdefault(source, []).append(key)
        parts = [f"{source}: keys {', '.join(keys[:shown])}{' ...' if len(keys) > shown else ''}"
                 for source, keys in by_file.items()]
        (first_source, first_key), first_reason = next(iter(self.records.items()))
        return (f"{self.num_corrupt} distinct corrupt records in this run, more than max_corrupt={self.max_corrupt} "
                f"({'; '.join(parts)}). First: {first_source} key {first_key}: {first_reason}. The file is damaged "
                "or not in the expected format; raise data.train_dataset.max_corrupt to train on without them.")

    def skipped_small_batch(self, size: int, dropped: int) -> None:
        self.small_batches += 1
        log.warning("a training batch kept %d image(s) after dropping %d bad record(s); batches need >= %d "
                    "images (BatchNorm), so it is skipped (%d skipped in this run)", size, dropped,
                    MIN_TRAIN_BATCH, self.small_batches)

    def state_dict(self) -> dict[str, Any]:
        return {"records": [[s, k, r] for (s, k), r in self.records.items()], "small_batches": self.small_batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.records = {(s, k): r for s, k, r in state.get("records", [])}
        self.small_batches = int(state.get("small_batches", 0))
