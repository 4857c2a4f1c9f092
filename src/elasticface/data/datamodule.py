"""FaceDataModule: one training set of labelled faces, any number of verification pair sets.

Datasets hand out raw uint8 images; the flip and the [-1, 1] scaling run on the device after transfer
(`on_after_batch_transfer`), so workers only decode and the host-to-device copy is 4x smaller.

Exact resume: the training loader is torchdata's StatefulDataLoader (Lightning 2.6 checkpoints the
`state_dict()` of such loaders and restores it mid-epoch, worker processes included), the shuffle is a
pure function of (seed, epoch), and every training step draws its random numbers (flip, augmentation,
dropout, sampled centres) from a torch RNG reseeded from (seed, rank, step). So a run resumed from any
step's checkpoint sees the same samples, flips and margins as the run that was never stopped.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from elasticface.data.face_dataset import FaceDataset, require_face_dataset
from elasticface.data.faults import DroppedRecord, FaultLedger, too_small_to_train
from elasticface.data.pairs import PairSet
from elasticface.data.transforms import BatchAugment, normalize, random_hflip, resize
from elasticface.metrics.verification import check_pairs_for_folds
from elasticface.utils.seeding import stream_seed
from elasticface.utils.threads import allowed_cores
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)
# torchdata 0.11 calls a torch API that torch 2.14 deprecated, once per loader: noise, not a user problem
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[DroppedRecord]]


def collate_faces(samples: Sequence[tuple[torch.Tensor, int] | DroppedRecord | None]) -> Batch:
    """Stack (image, label) samples, dropping what a dataset returns for a corrupt record.

    The third element counts the dropped records (logged by the module), the fourth names them (counted
    once per record over the run by the DataModule's FaultLedger).
    """
    kept = [s for s in samples if s is not None and not isinstance(s, DroppedRecord)]
    dropped = [s for s in samples if isinstance(s, DroppedRecord)]
    skipped = torch.tensor(len(samples) - len(kept))
    if not kept:
        return torch.empty(0, 3, 112, 112, dtype=torch.uint8), torch.empty(0, dtype=torch.long), skipped, dropped
    images = torch.stack([s[0] for s in kept])
    labels = torch.as_tensor([int(s[1]) for s in kept], dtype=torch.long)
    return images, labels, skipped, dropped


#: the most loader workers `data.num_workers=auto` starts: decoding 112x112 JPEGs, four keep up with a GPU's step
MAX_AUTO_WORKERS = 4


def loader_workers(setting: int | str, processes: int = 1) -> int:
    """`data.num_workers`: a count as given, or `auto`: the cores this process may use (affinity, cgroup quota)
    shared among the `processes` training on them, at most MAX_AUTO_WORKERS and at least 1. More workers than
    cores only queue, and torch's and torchdata's loaders warn about them at every epoch."""
    if setting == "auto":
        return max(1, min(MAX_AUTO_WORKERS, allowed_cores() // max(1, int(processes))))
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise BadValue(f"data.num_workers={setting!r}: expected auto or a count >= 0 (0 loads in the training "
                         "process)")
    return setting


def check_people_disjoint(train_set: Any, val_sets: dict[str, PairSet]) -> None:
    """Verification is on people the model never trained on: a pair set read from image files in a folder per
    person (a pairs list) that names a training person is an error naming the person and the set. Sets without
    names (`.bin`) are split by identity when they are made (elasticface-cfp-split, elasticface-lfw-split)."""
    trained = set(getattr(train_set, "classes", None) or ())
    for name, pairs in val_sets.items():
        images = getattr(pairs, "images", None)
        if not trained or not images or not all(isinstance(i, str) for i in images):
            continue
        both = sorted(trained & {os.path.basename(os.path.dirname(path)) for path in images})
        if both:
            raise BadValue(f"{getattr(pairs, 'source', None) or name}: names {len(both)} people the training folder "
                             f"holds too ({', '.join(both[:3])}{', ...' if len(both) > 3 else ''}): verification must "
                             "be on people never trained on; split the folder by person (elasticface-lfw-split, "
                             "elasticface-cfp-split) or remove them from one side")


def worker_start_context(num_workers: int) -> Any:
    """How loader workers start: Python's own default, also inside a job of a joblib sweep (launcher=joblib),
    whose worker processes make loky the default start method, and loky cannot start a DataLoader's workers
    ("'Process' object has no attribute 'env'"). None (torch's choice) wherever the default is a standard one."""
    method = multiprocessing.get_start_method(allow_none=True)
    if num_workers == 0 or method is None or method in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context(multiprocessing.get_all_start_methods()[0])


class FaceDataModule(pl.LightningDataModule):
    """Training faces + verification pair sets, built lazily from the factories the config gives.

    `train_dataset` and `val_sets` are zero-argument callables (Hydra `_partial_` nodes) so that building
    the DataModule is cheap and worker processes never receive half-built state; the first returns a
    `FaceDataset` (checked in `setup`). `root`, `val_root`
    and `decoder` are read by those factories through config interpolation and accepted here so one
    config node describes the data completely; `decoder=dali` swaps the training loader for DALI's.
    `image_size` resizes every batch (training and validation) on the device, e.g. 112 -> 56 for CPU runs.
    """

    def __init__(
        self,
        train_dataset: Callable[[], FaceDataset],
        val_sets: Callable[[], dict[str, PairSet]] | None = None,
        batch_size: int = 128,
        val_batch_size: int = 256,
        num_workers: int | str = "auto",
        pin_memory: bool = True,
        persistent_workers: bool = True,
        hflip: bool = True,
        augment: dict[str, Any] | None = None,
        drop_last: bool = True,
        sampler: Callable[..., Sampler] | None = None,
        root: str | None = None,
        val_root: str | None = None,
        decoder: str | None = None,
        num_classes: int | None = None,
        image_size: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise BadValue(f"data.batch_size={batch_size}: must be >= 1")
        if val_batch_size < 1:
            raise BadValue(f"data.val_batch_size={val_batch_size}: must be >= 1")
        if image_size is not None and image_size < 8:
            raise BadValue(f"data.image_size={image_size}: must be >= 8 pixels, or null to keep the data's size")
        self.image_size = image_size
        self.train_factory = train_dataset
        self.val_factory = val_sets
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size
        self.num_workers = loader_workers(num_workers)
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.persistent_workers = persistent_workers and self.num_workers > 0
        self.hflip = hflip
        self.augment = BatchAugment(**(augment or {}))
        self.drop_last = drop_last
        self.sampler_factory = sampler
        self.expected_num_classes = num_classes
        self.root = root
        self.decoder = decoder
        self.seed = int(seed)
        self.train_set: FaceDataset | None = None
        self.val_sets: dict[str, PairSet] = {}
        self.faults = FaultLedger()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None and stage in (None, "fit"):
            dataset = require_face_dataset(self.train_factory())
            self.check_train_set(dataset)
            self.faults.max_corrupt = int(dataset.max_corrupt)
            # records the dataset dropped while it was built count toward the same run-wide limit
            self.faults.add(list(dataset.dropped_at_scan))
            self.train_set = dataset
        if not self.val_sets and self.val_factory is not None:
            self.val_sets = dict(self.val_factory())
        if self.train_set is not None:
            check_people_disjoint(self.train_set, self.val_sets)
        check_pairs_for_folds(self.val_sets)

    def check_train_set(self, dataset: FaceDataset) -> None:
        size = len(dataset)
        if self.drop_last and self.batch_size > size:
            raise BadValue(
                f"data.batch_size={self.batch_size} does not fit the data: the training set has only {size} images "
                "(lower data.batch_size or set data.drop_last=false)"
            )
        found = int(dataset.num_classes)
        if self.expected_num_classes is not None and self.expected_num_classes != found:
            raise BadValue(f"data.num_classes={self.expected_num_classes} but the training data has {found} classes")

    @property
    def num_classes(self) -> int:
        if self.train_set is None:
            self.setup("fit")
        assert self.train_set is not None
        return int(self.train_set.num_classes)

    def loader_kwargs(self) -> dict[str, Any]:
        return dict(num_workers=self.num_workers, pin_memory=self.pin_memory,
                    persistent_workers=self.persistent_workers,
                    multiprocessing_context=worker_start_context(self.num_workers))

    def rank_and_world(self) -> tuple[int, int]:
        """(rank, world size) of the trainer's processes, as `distributed.rank_and_world` orders them; (0, 1) alone."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> StatefulDataLoader | Any:
        assert self.train_set is not None, "call setup('fit') first"
        rank, world_size = self.rank_and_world()
        if self.decoder == "dali":
            from elasticface.data.dali import DaliRecordIOLoader

            return DaliRecordIOLoader(self.train_set, self.batch_size, shard_id=rank, num_shards=world_size,
                                      hflip=self.hflip, normalize=True, seed=torch.initial_seed() % 2**31 + rank)
        if self.sampler_factory is not None:
            # identity-aware batches: the sampler shards across ranks itself (trainer.use_distributed_sampler=false)
            sampler = self.sampler_factory(self.train_set, batch_size=self.batch_size, num_replicas=world_size,
                                           rank=rank)
            return StatefulDataLoader(self.train_set, batch_sampler=sampler, collate_fn=collate_faces,
                                      **self.loader_kwargs())
        # the epoch's order is a function of (seed, epoch): Lightning calls set_epoch; the same rule on 1 or N ranks
        shuffle = DistributedSampler(self.train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=self.seed)
        return StatefulDataLoader(self.train_set, batch_size=self.batch_size, sampler=shuffle, drop_last=self.drop_last,
                                  collate_fn=collate_faces, **self.loader_kwargs())

    def val_dataloader(self) -> list[DataLoader]:
        """Each set's distinct images once (the module's metrics give every stored copy its embedding)."""
        return [DataLoader(pairs.distinct_images(), batch_size=self.val_batch_size, shuffle=False,
                           **self.loader_kwargs()) for pairs in self.val_sets.values()]

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        images, rest = batch[0], tuple(batch[1:])
        training = self.trainer is not None and self.trainer.training
        if training:
            trainer = self.trainer
            # every random draw of step s (flip, augmentation, dropout, sampled centres) from (seed, rank, s)
            torch.manual_seed(stream_seed(self.seed, trainer.global_rank, trainer.global_step))
            if len(batch) > 3:
                self.faults.add(batch[3])
                if too_small_to_train(images):
                    self.faults.skipped_small_batch(images.shape[0], len(batch[3]))
        if not images.is_floating_point():  # DALI batches arrive flipped and scaled already
            if training and self.hflip:
                images = random_hflip(images)
            images = normalize(images)
        if self.image_size is not None:
            images = resize(images, self.image_size)
        return (self.augment(images) if training else images, *rest)

    def state_dict(self) -> dict[str, Any]:
        return {"faults": self.faults.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.faults.load_state_dict(state_dict.get("faults", {}))
