"""At the end of training, measure the toy example's 2-D geometry (`experiment=toy_2d`, paper Fig. 2).

Embeds every training face (eval mode, no flip), takes the class centres from the centres layer and
writes toy_2d.json (angles between consecutive centres, per-class angular std), the arrays (.npy) and
toy_2d.png into the run directory; the two headline numbers also go to the loggers as `toy/...`.
Without a 2-D embedding (debug=tiny sets 32) it warns and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch.utils.data import DataLoader

from elasticface.data.datamodule import collate_faces
from elasticface.data.transforms import normalize, resize
from elasticface.eval.toy_2d import RESULT_FILE, toy_geometry, write_toy_results


class Toy2DGeometry(pl.Callback):
    def __init__(self, output_dir: str, batch_size: int = 256) -> None:
        self.output_dir = Path(output_dir)
        self.batch_size = batch_size

    @torch.no_grad()
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        centres = pl_module.centers.weight.detach().float().cpu().numpy()
        if centres.shape[1] != 2:
            # debug=tiny sets model.embedding_size=32: the run is still a valid smoke test of the rest
            rank_zero_warn(f"Toy2DGeometry: model.embedding_size={centres.shape[1]}, but the toy example's geometry "
                           f"needs a 2-D embedding (model.embedding_size=2); no {RESULT_FILE} written")
            return
        datamodule = trainer.datamodule
        dataset = datamodule.train_set
        if centres.shape[0] != dataset.num_classes:
            raise ValueError(f"Toy2DGeometry needs one centre per class: {centres.shape[0]} centres for "
                             f"{dataset.num_classes} classes (sub-centre heads are not supported)")
        embeddings, labels = self.embed(pl_module, dataset, getattr(datamodule, "image_size", None))
        geometry = toy_geometry(embeddings, labels, centres, getattr(dataset, "identity_variation", None))
        head = type(pl_module.head).__name__
        if getattr(pl_module.head, "plus", False):
            head += "+"
        sigma = getattr(pl_module.head, "sigma", None)
        title = f"{head} m={getattr(pl_module.head, 'm', '?')}" + (f" σ={sigma}" if sigma is not None else "")
        write_toy_results(self.output_dir, embeddings, labels, centres, geometry, title)
        for logger in trainer.loggers:
            logger.log_metrics({"toy/gap_mean_abs_error_deg": geometry["gap_mean_abs_error_deg"],
                                "toy/mean_class_std_deg": geometry["mean_class_std_deg"]}, step=trainer.global_step)

    def embed(self, pl_module: pl.LightningModule, dataset: torch.utils.data.Dataset,
              image_size: int | None) -> tuple[np.ndarray, np.ndarray]:
        was_training = pl_module.training
        pl_module.eval()
        embeddings, labels = [], []
        try:
            for images, batch_labels, *_ in DataLoader(dataset, batch_size=self.batch_size, collate_fn=collate_faces):
                images = normalize(images.to(pl_module.device))
                if image_size is not None:
                    images = resize(images, image_size)
                embeddings.append(pl_module.embed(images).float().cpu())
                labels.append(batch_labels)
        finally:
            pl_module.train(was_training)
        return torch.cat(embeddings).numpy(), torch.cat(labels).numpy()
