"""A callback for subprocess tests: each rank writes, per epoch, the sample indices its sampler hands it,
its global rank, and the class-centre shard it holds (json files under `path`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytorch_lightning as pl


class RecordSamples(pl.Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = trainer.train_dataloader
        sampler = getattr(loader, "sampler", None)
        centers = pl_module.centers
        record = {
            "global_rank": trainer.global_rank, "world_size": trainer.world_size, "node_rank": trainer.node_rank,
            "epoch": trainer.current_epoch, "dataset_size": len(loader.dataset), "indices": [int(i) for i in sampler],
            "sampler_rank": getattr(sampler, "rank", None), "sampler_replicas": getattr(sampler, "num_replicas", None),
            "shard": {"rank": getattr(centers, "rank", None), "world": getattr(centers, "world", None),
                      "class_start": getattr(centers, "class_start", None),
                      "class_stop": getattr(centers, "class_stop", None),
                      "num_classes": getattr(centers, "num_classes", None)},
        }
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / f"rank{trainer.global_rank}_epoch{trainer.current_epoch}.json").write_text(json.dumps(record))
