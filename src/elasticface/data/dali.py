"""Optional NVIDIA DALI input pipeline (`data.decoder=dali`): JPEG decode, flip and scaling on the GPU.

Reads the same `train.rec`/`train.idx` as `RecordIODataset` with DALI's MXNet reader and yields
`(images, labels, skipped)` like the CPU loader's collate: images on the GPU as uint8 [B, 3, S, S]
(or float in [-1, 1] with `normalize=True`), int64 labels. DALI's reader visits every key in the
index, so for the legacy insightface layout a filtered index holding only the image keys is written
next to a cache directory. Install with `pip install elasticface[dali]` (nvidia-dali-cuda130: the CUDA major
of the pinned torch).
Limitation: DALI stops on an undecodable JPEG instead of skipping it; validate new data with the CPU
loader first (`data.decoder=torchvision`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator

import torch

from elasticface.data.recordio_dataset import RecordIODataset
from elasticface.utils.errors import BadValue
from elasticface.utils.requirements import require_module


def require_dali():
    """Import DALI or explain what is missing (package, or a CUDA device)."""
    require_module("nvidia.dali", "data.decoder=dali", "dali", "nvidia-dali-cuda130")
    import nvidia.dali as dali
    if not torch.cuda.is_available():
        raise RuntimeError("data.decoder=dali decodes on a CUDA GPU but torch.cuda.is_available() is False; "
                           "use data.decoder=torchvision on CPU machines")
    return dali


def image_index(dataset: RecordIODataset, cache_dir: str | None = None) -> str:
    """Path of an `.idx` listing only image records (the legacy layout's header/range keys removed)."""
    if dataset.layout != "legacy":
        return dataset.idx_path
    tag = hashlib.sha1(
        f"{os.path.abspath(dataset.idx_path)}:{os.path.getmtime(dataset.idx_path)}".encode()
    ).hexdigest()[:12]
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "elasticface_dali")
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"images_{tag}.idx")
    if not os.path.isfile(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            for key in dataset.image_keys.tolist():
                f.write(f"{key}\t{dataset.records.offset_of(key)}\n")
        os.replace(tmp, path)
    return path


class DaliRecordIOLoader:
    """Iterable over GPU batches from the training RecordIO dataset (already scanned); one shard per DDP rank."""

    def __init__(
        self,
        dataset: RecordIODataset,
        batch_size: int,
        num_threads: int = 4,
        device_id: int | None = None,
        shard_id: int = 0,
        num_shards: int = 1,
        image_size: int = 112,
        hflip: bool = True,
        normalize: bool = False,
        seed: int = 0,
        cache_dir: str | None = None,
    ) -> None:
        if not isinstance(dataset, RecordIODataset):
            raise BadValue(f"data.decoder=dali reads insightface RecordIO (data=recordio); the training set is a "
                            f"{type(dataset).__name__}: use data.decoder=torchvision")
        dali = require_dali()
        from nvidia.dali import fn, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.dataset = dataset
        self.num_classes = self.dataset.num_classes
        self.labels = self.dataset.labels
        device_id = torch.cuda.current_device() if device_id is None else device_id
        index_path = image_index(self.dataset, cache_dir)

        @dali.pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
        def pipe():
            jpegs, labels = fn.readers.mxnet(
                path=[self.dataset.rec_path],
                index_path=[index_path],
                random_shuffle=True,
                shard_id=shard_id,
                num_shards=num_shards,
                pad_last_batch=False,
                name="reader",
            )
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
            images = fn.resize(images, resize_x=image_size, resize_y=image_size)
            mirror = fn.random.coin_flip(probability=0.5) if hflip else 0
            if normalize:
                images = fn.crop_mirror_normalize(
                    images, dtype=types.FLOAT, output_layout="CHW", mirror=mirror, mean=[127.5] * 3, std=[127.5] * 3
                )
            else:
                images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW", mirror=mirror)
            return images, labels

        self.pipeline = pipe()
        self.pipeline.build()
        self.iterator = DALIGenericIterator(
            [self.pipeline],
            ["images", "labels"],
            reader_name="reader",
            last_batch_policy=LastBatchPolicy.DROP,
            auto_reset=True,
        )

    def __len__(self) -> int:
        return len(self.iterator)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for out in self.iterator:
            images = out[0]["images"]
            # float32 labels from the IfQQ header (first entry when a vector): round, never truncate
            labels = out[0]["labels"].reshape(images.shape[0], -1)[:, 0].round().long()
            yield images, labels, torch.zeros((), dtype=torch.long)
