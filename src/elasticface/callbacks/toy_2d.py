"""At the end of training, measure the toy example's 2-D geometry (`experiment=toy_2d`, paper Fig. 2).

Embeds every training face (eval mode, no flip), takes the class centres from the centres layer and
writes toy_2d.json (angles between consecutive centres, per-class angular std), the arrays (.npy) and
toy_2d.png into the run directory; the headline numbers also go to the loggers as `toy/...`.
It checks its setting before the first step, so a run that could not be measured never trains: a 2-D
embedding (model.embedding_size=2; debug=tiny sets 32, so add model.embedding_size=2 after it), at least
two identities and one centre per class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from elasticface.data.datamodule import collate_faces
from elasticface.data.transforms import normalize, resize
from elasticface.eval.toy_2d.geometry import toy_geometry
from elasticface.eval.toy_2d.results import write_toy_results


class Toy2DGeometry(pl.Callback):
    """`image_size` as the data module resizes (data.image_size); `identity_variation` as the dataset rendered
    it (data.train_dataset.identity_variation), for the spread per variation level."""

    def __init__(self, output_dir: str, batch_size: int = 256, image_size: int | None = None,
                 identity_variation: list[float] | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.batch_size = batch_size
        self.image_size = image_size
        self.identity_variation = None if identity_variation is None else [float(v) for v in identity_variation]

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        num_centres, embedding_size = pl_module.centers.weight.shape
        if embedding_size != 2:
            raise ValueError(f"the toy example (callbacks.toy_2d) measures a 2-D embedding: model.embedding_size="
                             f"{embedding_size}, expected 2 (debug=tiny sets 32: add model.embedding_size=2 after it)")
        num_classes = trainer.datamodule.train_set.num_classes
        if num_classes < 2:
            raise ValueError(f"the toy example (callbacks.toy_2d) needs at least 2 identities: "
                             f"data.train_dataset.num_identities={num_classes}")
        if num_centres != num_classes:
            raise ValueError(f"the toy example (callbacks.toy_2d) needs one centre per class: {num_centres} centres "
                             f"for {num_classes} classes (sub-centre heads are not supported)")

    @torch.no_grad()
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        centres = pl_module.centers.weight.detach().float().cpu().numpy()
        embeddings, labels = self.embed(pl_module, trainer.datamodule.train_set, self.image_size)
        geometry = toy_geometry(embeddings, labels, centres, self.identity_variation)
        # the head as the config named it (head=elastic_arc_plus m=0.5 sigma=0.0175), not as a class
        spec = pl_module.hparams["head"]
        title = spec.get("name", spec["_target_"].rsplit(".", 1)[-1]) + "".join(
            f" {k}={spec[k]}" for k in ("m", "sigma") if spec.get(k) is not None)
        write_toy_results(self.output_dir, embeddings, labels, centres, geometry, title)
        for logger in trainer.loggers:
            logger.log_metrics({"toy/gap_mean_abs_error_deg": geometry["gap_mean_abs_error_deg"],
                                "toy/mean_class_std_deg": geometry["mean_class_std_deg"],
                                "toy/overlap_fraction": geometry["overlap_fraction"]}, step=trainer.global_step)

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
