"""FaceRecognitionModule: backbone -> embedding -> class centres -> margin head -> cross-entropy.

The module is built from plain config dicts (saved as hyperparameters), so `load_from_checkpoint(path)`
rebuilds the exact model with no Hydra and no extra arguments, which eval.py and export rely on.

With `ShardedFC` centres under DDP (`model=model_parallel`) each rank keeps a slice of the classes
(see sharded_centers.py): the step gathers the global batch, the head sees this rank's columns, and
the cross-entropy is reduced across ranks. Checkpoints still hold all centres.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from elasticface.data.faults import too_small_to_train
from elasticface.distributed import ClassShard, rank_and_world, scale_grad
from elasticface.loss import margin_softmax_loss
from elasticface.metrics.verification import VerificationAccuracy, flip_fused_embeddings
from elasticface.sharded_centers import ShardedFC
from elasticface.utils.lightning_private import attached_trainer, should_update_logs
from elasticface.utils.speed import compile_available


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def partial_validation(trainer: pl.Trainer) -> bool:
    """Whether the trainer embeds only part of each pair set (fast_dev_run, overfit_batches, limit_val_batches)."""
    limit = trainer.limit_val_batches
    return bool(trainer.fast_dev_run) or trainer.overfit_batches > 0 or isinstance(limit, int) or limit < 1.0


class FaceRecognitionModule(pl.LightningModule):
    def __init__(
        self,
        backbone: dict,
        head: dict,
        centers: dict,
        optimizer: dict,
        num_classes: int,
        scheduler: dict | None = None,
        embedding_size: int = 512,
        clip_grad_norm: float | None = 5.0,
        val_flip: bool = True,
        backbone_lr_scale: float = 1.0,
        freeze_backbone_bn: bool = False,
        compile: bool = False,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(backbone_lr_scale, bool) or not isinstance(backbone_lr_scale, (int, float)) or not backbone_lr_scale >= 0:
            raise ValueError(f"model.backbone_lr_scale={backbone_lr_scale!r}: expected a number >= 0")
        backbone, head, centers, optimizer, scheduler = map(_plain, (backbone, head, centers, optimizer, scheduler))
        self.save_hyperparameters(logger=False)  # train.py logs the whole resolved config instead
        self.backbone: nn.Module = instantiate(backbone)
        self.head: nn.Module = instantiate(head)
        self.centers: nn.Module = instantiate(centers)(
            embedding_size=embedding_size, num_classes=num_classes,
            centers_per_class=getattr(self.head, "centers_per_class", 1),
            normalize=getattr(self.head, "normalized", True),
        )
        self.channels_last = channels_last
        if channels_last:
            self.backbone.to(memory_format=torch.channels_last)
        if compile and compile_available(self.backbone):
            self.backbone.compile()  # in place: the state_dict keeps its names (no `_orig_mod.`)
        self.val_metrics = nn.ModuleDict()
        self.register_buffer("best_acc_mean", torch.tensor(float("nan"), dtype=torch.float64))
        self.validated_at_step: int | None = None
        self._theta_y: Tensor | None = None
        self._theta_valid: Tensor | None = None
        self._skipped_records: Tensor | None = None

    # -- model ---------------------------------------------------------------------------------------
    def embed(self, images: Tensor) -> Tensor:
        """Raw (unnormalised) face embeddings of images already scaled to [-1, 1]."""
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.backbone(images)

    def forward(self, images: Tensor) -> Tensor:
        return self.embed(images)

    # -- training ------------------------------------------------------------------------------------
    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor | None:
        images, labels = batch[0], batch[1]
        if too_small_to_train(images):  # too few records left readable; counted by the DataModule
            return None
        embeddings = self.embed(images)
        if self.sharded_centers:
            # DDP averages the backbone's gradients over ranks, but the gathered batch already hands each
            # rank the full dL/d(its embeddings): scale by world so the average is the exact gradient.
            embeddings = scale_grad(embeddings, self.centers.world)
        out = margin_softmax_loss(self.centers, self.head, embeddings, labels)
        # Per-step values only on the steps the loggers write: each `self.log` costs Lightning about a
        # millisecond of Python, and a progress-bar value a host sync (the bar reads train/loss itself).
        if self.logging_step:
            if out.aux is not None:
                self.log("train/aux_loss", out.aux.detach(), on_step=True)
            self.log("train/loss", out.loss.detach(), on_step=True)
        self.log_batch_stats(out.cos, out.labels, batch, out.shard)
        return out.loss

    @property
    def logging_step(self) -> bool:
        """Whether this training step's logged values reach the loggers (`trainer.log_every_n_steps`)."""
        trainer = attached_trainer(self)
        return trainer is None or should_update_logs(trainer)

    def on_train_epoch_end(self) -> None:
        if self._skipped_records is not None:
            self.log("data/skipped_records", self._skipped_records, on_step=False, on_epoch=True, reduce_fx="sum",
                     sync_dist=True)
            self._skipped_records = None

    @property
    def sharded_centers(self) -> bool:
        """True when this rank holds only a slice of the class centres (ShardedFC under DDP)."""
        return isinstance(self.centers, ShardedFC) and self.centers.is_sharded

    def log_batch_stats(self, cos: Tensor, labels: Tensor, batch: tuple[Tensor, ...],
                        shard: ClassShard | None = None) -> None:
        """Margins drawn this step, the target angles, and records the loader had to drop.

        Keeping only rows with a label (a boolean mask) syncs the device with the host, so the step
        stores all rows and the statistics are computed only on the steps the loggers write.
        """
        if getattr(self.head, "normalized", True):
            k = getattr(self.head, "centers_per_class", 1)  # sub-centre heads: columns c*K..c*K+K-1, the closest speaks
            columns = labels.clamp_min(0)[:, None] * k + torch.arange(k, device=labels.device)
            cos_y = cos.detach().gather(1, columns).amax(dim=1)
            valid = labels >= 0
            if shard is not None:  # the target column of a row may live on another rank
                cos_y, valid = shard.target_cos(cos_y, valid), shard.valid
            self._theta_y, self._theta_valid = torch.acos(cos_y.clamp(-1.0, 1.0)), valid
        if len(batch) > 2 and isinstance(batch[2], Tensor):  # summed on the device, logged at the epoch's end
            skipped = batch[2].float().sum()
            self._skipped_records = skipped if self._skipped_records is None else self._skipped_records + skipped
        if not self.logging_step:
            return
        theta_y = self.last_theta_y
        if theta_y is not None and theta_y.numel():
            self.log("train/theta_y_mean_deg", torch.rad2deg(theta_y.mean()), on_step=True)
        margins = getattr(self.head, "last_margins", None)
        if margins is not None and margins.numel() > 1:
            self.log("train/margin_mean", margins.mean(), on_step=True)
            self.log("train/margin_std", margins.std(), on_step=True)

    @property
    def last_theta_y(self) -> Tensor | None:
        """Angles (radians) between the last training batch's embeddings and their class centres."""
        if self._theta_y is None:
            return None
        return self._theta_y[self._theta_valid]

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip the backbone's gradient norm only, as the official ElasticFace code does (norm 5)."""
        if self.hparams.clip_grad_norm:
            nn.utils.clip_grad_norm_(self.backbone.parameters(), self.hparams.clip_grad_norm)
        if gradient_clip_val:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def freeze_backbone_bn(self) -> None:
        """With freeze_backbone_bn, the backbone's BatchNorm layers stay in eval mode: their running
        statistics keep the values the weights came with."""
        if self.hparams.get("freeze_backbone_bn"):
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()

    def train(self, mode: bool = True) -> "FaceRecognitionModule":
        super().train(mode)
        if mode:
            self.freeze_backbone_bn()
        return self

    def on_train_epoch_start(self) -> None:
        # Lightning does not call train() when fitting starts, and restores each submodule's mode after validation
        self.freeze_backbone_bn()

    def param_groups(self) -> list[dict[str, Any]]:
        """The backbone at optimizer.lr x backbone_lr_scale, everything else (class centres, head) at optimizer.lr."""
        scale = float(self.hparams.get("backbone_lr_scale", 1.0))
        if scale == 1.0:
            return [{"params": list(self.parameters())}]
        backbone = list(self.backbone.parameters())
        ids = {id(p) for p in backbone}
        rest = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": backbone, "lr": float(self.hparams.optimizer["lr"]) * scale, "name": "backbone"},
                {"params": rest, "name": "centers_head"}]

    def configure_optimizers(self) -> Any:
        optimizer = instantiate(self.hparams.optimizer)(params=self.param_groups())
        if not self.hparams.scheduler:
            return optimizer
        scheduler = instantiate(self.hparams.scheduler)(optimizer=optimizer,
                                                        total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # -- sharded centres and checkpoints ---------------------------------------------------------------
    _CENTERS_KEY = "centers.weight"

    def configure_model(self) -> None:
        """Keep this rank's slice of ShardedFC centres: after the process group exists, before a checkpoint
        is restored, DDP wraps the module and the optimizer is built."""
        rank, world = rank_and_world()
        if isinstance(self.centers, ShardedFC) and world > 1:
            self.centers.shard(rank, world)
            # the shard is this rank's own: DDP must neither broadcast nor all-reduce it
            self._ddp_params_and_buffers_to_ignore = [name for name, p in self.named_parameters()
                                                      if p is self.centers.weight]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if isinstance(self.centers, ShardedFC):
            optimizers = list(attached_trainer(self).optimizers) if attached_trainer(self) is not None else []
            self.centers.gather_checkpoint(checkpoint, self._CENTERS_KEY, optimizers)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse centres for another number of classes; keep this rank's rows of sharded centres."""
        weight = checkpoint.get("state_dict", {}).get(self._CENTERS_KEY)
        k = self.centers.centers_per_class
        expected = self.hparams.num_classes * k
        if weight is not None and weight.shape[0] != expected:
            path = getattr(attached_trainer(self), "ckpt_path", None) or "the checkpoint"
            raise ValueError(
                f"{path}: its class centres hold {weight.shape[0] // k} classes ({weight.shape[0]} rows of "
                f"{self._CENTERS_KEY}) but the training data has num_classes={self.hparams.num_classes} "
                f"({expected} rows with {k} centres per class)"
            )
        if isinstance(self.centers, ShardedFC):
            self.centers.slice_checkpoint(checkpoint, self._CENTERS_KEY)

    # -- validation ----------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        for name, pairs in (getattr(datamodule, "val_sets", None) or {}).items():
            if name not in self.val_metrics:
                self.val_metrics[name] = VerificationAccuracy(pairs.issame, allow_partial=partial_validation(self.trainer))

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        images, indices = batch
        name = list(self.val_metrics.keys())[dataloader_idx]
        self.val_metrics[name].update(flip_fused_embeddings(self.embed, images, self.hparams.val_flip), indices)

    def on_validation_epoch_end(self) -> None:
        if not len(self.val_metrics):
            return
        accuracies = []
        for name, metric in self.val_metrics.items():
            result = metric.compute()
            for key, value in result.items():
                self.log(f"val/{name}/{key}", value)
            accuracies.append(result["acc"])
            metric.reset()
        acc_mean = torch.stack(accuracies).mean()
        if torch.isnan(self.best_acc_mean) or acc_mean > self.best_acc_mean:
            self.best_acc_mean.fill_(acc_mean.item())
        self.validated_at_step = self.global_step
        self.log("val/acc_mean", acc_mean, prog_bar=True)
        self.log("val/acc_mean_best", self.best_acc_mean.clone())
