"""FaceRecognitionModule: backbone -> embedding -> class layer (centres, margin head, cross-entropy).

The module is built from plain config dicts (saved as hyperparameters), so `load_from_checkpoint(path)`
rebuilds the exact model with no Hydra and no extra arguments, which eval.py and export rely on.

The class layer is :class:`elasticface.classifier.Classifier`: the step calls it once and returns what it gives;
sharded centres (`model=model_parallel`) and their checkpoint gather/slice live there too. The step is embed ->
classify -> loss: its statistics (callbacks/step_statistics.py), whether it ran compiled (callbacks/compiled_steps.py)
and what a fine-tune changes in training (finetune/) are callbacks that read what it returns.
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.accelerators import CPUAccelerator
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from elasticface.classifier import Classifier
from elasticface.utils.distributed import rank_and_world
from elasticface.data.faults import too_small_to_train
from elasticface.heads.base import MarginHead
from elasticface.margin_schedule import MarginSchedule
from elasticface.metrics.verification import CPU_MICRO_BATCH, VerificationAccuracy, flip_fused_embeddings
from elasticface.utils.lightning_private import attached_trainer
from elasticface.utils.speed import (CompiledCalls, backbone_family, check_channels_last_setting,
                                     check_compile_backend, check_compile_mode, check_compile_setting,
                                     compile_available, compile_in_place, should_compile, should_use_channels_last)
from elasticface.untrusted import build_from_checkpoint
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)


def _as_container(cfg: Any) -> Any:
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
        classifier: dict | None = None,
        compile: bool | str = False,
        compile_backend: str = "inductor",
        compile_mode: str = "default",
        channels_last: bool | str = False,
        margin_schedule: dict | None = None,
        built_backbone: nn.Module | None = None,
    ) -> None:
        """`backbone` is the config the backbone is built from (kept in the checkpoint); `built_backbone`, when
        given, is that backbone already built (and loaded from `weights=`: backbones/from_weights.py)."""
        super().__init__()
        backbone, head, centers, optimizer, scheduler, classifier, margin_schedule = map(
            _as_container, (backbone, head, centers, optimizer, scheduler, classifier, margin_schedule))
        self.margin_schedule = MarginSchedule(**(margin_schedule or {}))
        self._margin_steps = 0  # the schedule's length in this run's steps, set when fitting starts
        # train.py logs the whole resolved config instead; the built backbone is in the state_dict, not the config
        self.save_hyperparameters(logger=False, ignore=["built_backbone"])
        self.backbone: nn.Module = built_backbone if built_backbone is not None else instantiate(backbone)
        head_module = instantiate(head)
        if not isinstance(head_module, MarginHead):
            raise BadValue(f"model.head: {head.get('_target_')!r} builds a {type(head_module).__name__}, "
                             "expected a subclass of elasticface.heads.MarginHead")
        centers_module = instantiate(centers)(
            embedding_size=embedding_size, num_classes=num_classes,
            centers_per_class=head_module.centers_per_class, normalize=head_module.normalized,
        )
        self.classifier = Classifier(centers_module, head_module, **(classifier or {}))
        # NHWC now (true) or in setup() once the accelerator and compilation are known (auto); `embed` reads
        # self.channels_last
        self.channels_last_setting = check_channels_last_setting(channels_last)
        self.channels_last = False
        if channels_last is True:
            self.use_channels_last()
        # compiled in setup("fit"), once the accelerator is known: models loaded for evaluation or export stay eager
        self.compile_setting = check_compile_setting(compile)
        self.compile_backend = check_compile_backend(compile_backend)
        self.compile_mode = check_compile_mode(compile_mode, self.compile_backend)
        self.compiled_calls: CompiledCalls | None = None  # set once compiled: counts the calls into its graphs
        # named submodules whose parameters form their own optimizer group: {"backbone": {"lr_scale": 0.1,
        # "weight_decay": 0.0}} (lr_scale times optimizer.lr, any other optimizer option as is); set by callbacks
        # in their setup (finetune/phases.py), before the optimizer is built
        self.param_group_options: dict[str, dict[str, float]] = {}
        self.val_metrics = nn.ModuleDict()
        self.register_buffer("best_acc_mean", torch.tensor(float("nan"), dtype=torch.float64))
        self.validated_at_step: int | None = None

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, map_location: Any = None, strict: bool | None = None,
                             **overrides: Any) -> "FaceRecognitionModule":
        """The module of a checkpoint, which is data: read with weights_only=True from a local file, every
        `_target_` of its hyperparameters checked against `elasticface.untrusted`'s allowlist before anything is
        built (`overrides` are the caller's and unchecked)."""
        return build_from_checkpoint(cls, checkpoint_path, map_location, strict, **overrides)

    @property
    def head(self) -> MarginHead:
        """The margin head (inside the classifier); callbacks read its settings."""
        return self.classifier.head

    @property
    def centers(self) -> nn.Module:
        """The class centres (inside the classifier)."""
        return self.classifier.centers

    def __setattr__(self, name: str, value: Any) -> None:
        """Lightning sets `_current_fx_name` ~47 times a step: a plain attribute, spared nn.Module's checks."""
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    # -- model ---------------------------------------------------------------------------------------
    def use_channels_last(self) -> None:
        """NHWC weights and inputs for the backbone's convolutions."""
        self.backbone.to(memory_format=torch.channels_last)
        self.channels_last = True

    def embed(self, images: Tensor) -> Tensor:
        """Raw (unnormalised) face embeddings of images already scaled to [-1, 1]."""
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.backbone(images)

    def forward(self, images: Tensor) -> Tensor:
        return self.embed(images)

    # -- training ------------------------------------------------------------------------------------
    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> dict[str, Any] | None:
        """embed -> classify -> loss. Returns the loss and what the callbacks read: the class layer's output
        (angles, margins, target logits), the embeddings and the margin weight."""
        images, labels = batch[0], batch[1]
        if too_small_to_train(images):  # too few records left readable; counted by the DataModule
            return None
        margin_weight = self.margin_schedule.weight(self.global_step, self._margin_steps)
        embeddings = self.embed(images)
        out = self.classifier(embeddings, labels, margin_weight=margin_weight)
        return {"loss": out.loss, "classifier": out, "embeddings": embeddings.detach(), "margin_weight": margin_weight}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Lightning's step, then the gradients dropped at once. Lightning clears them only inside the next
        step, after its forward: one whole set of gradients (the centres' [C, D] among them: 3.8 GiB at 2M classes)
        would stay alive beside that forward's activations, where a step's memory can peak (docs/speed.md)."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer.zero_grad(set_to_none=True)

    def on_fit_start(self) -> None:
        """The margin schedule's length in this run's steps."""
        self._margin_steps = self.margin_schedule.length(self.trainer.estimated_stepping_batches)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip the backbone's gradient norm only, as the official ElasticFace code does (norm 5)."""
        if self.hparams.clip_grad_norm:
            nn.utils.clip_grad_norm_(self.backbone.parameters(), self.hparams.clip_grad_norm)
        if gradient_clip_val:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def param_groups(self) -> list[dict[str, Any]]:
        """All parameters in one optimizer group, or each submodule named in `param_group_options` in its own
        (`lr_scale` times optimizer.lr, other options as given) and the rest (class centres, head) in one more."""
        if not self.param_group_options:
            return [{"params": list(self.parameters())}]
        groups, taken = [], set()
        for name, options in self.param_group_options.items():
            params = [p for p in self.get_submodule(name).parameters() if id(p) not in taken]
            taken.update(id(p) for p in params)
            extra = {k: v for k, v in options.items() if k != "lr_scale"}
            lr = float(self.hparams.optimizer["lr"]) * float(options.get("lr_scale", 1.0))
            groups.append({"params": params, "lr": lr, "name": name} | extra)
        groups.append({"params": [p for p in self.parameters() if id(p) not in taken], "name": "centers_head"})
        return groups

    def configure_optimizers(self) -> Any:
        optimizer = instantiate(self.hparams.optimizer)(params=self.param_groups())
        if not self.hparams.scheduler:
            return optimizer
        factory = dict(self.hparams.scheduler)
        interval = factory.pop("interval", "step")  # Lightning's key, not the factory's: when the schedule advances
        scheduler = instantiate(factory)(optimizer=optimizer, total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}

    # -- sharded centres and checkpoints ---------------------------------------------------------------
    _CENTERS_KEY = "classifier.centers.weight"

    def configure_model(self) -> None:
        """Keep this rank's slice of ShardedFC centres: after the process group exists, before a checkpoint
        is restored, DDP wraps the module and the optimizer is built."""
        own = self.classifier.shard(*rank_and_world())
        if own:  # the shard is this rank's own: DDP must neither broadcast nor all-reduce it
            self._ddp_params_and_buffers_to_ignore = [name for name, p in self.named_parameters()
                                                      if any(p is q for q in own)]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        trainer = attached_trainer(self)
        optimizers = list(trainer.optimizers) if trainer is not None else []
        self.classifier.gather_checkpoint(checkpoint, self._CENTERS_KEY, optimizers)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse centres for another number of classes; keep this rank's rows of sharded centres."""
        path = getattr(attached_trainer(self), "ckpt_path", None) or "the checkpoint"
        self.classifier.slice_checkpoint(checkpoint, self._CENTERS_KEY, self.hparams.num_classes, str(path))

    # -- validation ----------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        training_on_cpu = isinstance(self.trainer.accelerator, CPUAccelerator)
        family = backbone_family(self.hparams.backbone.get("name"))
        if stage == "fit" and self.compiled_calls is None \
                and should_compile(self.compile_setting, training_on_cpu, family) and compile_available(self.backbone):
            self.compiled_calls = compile_in_place(self.backbone, self.compile_backend, self.compile_mode,
                                                   "cpu" if training_on_cpu else "cuda")
        if not self.channels_last and should_use_channels_last(self.channels_last_setting, training_on_cpu,
                                                               self.compiled_calls is not None, family):
            self.use_channels_last()
        datamodule = getattr(self.trainer, "datamodule", None)
        for name, pairs in (getattr(datamodule, "val_sets", None) or {}).items():
            if name not in self.val_metrics:
                allow_partial = partial_validation(self.trainer)
                self.val_metrics[name] = VerificationAccuracy(pairs.issame, allow_partial=allow_partial,
                                                              image_of=pairs.image_of)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        images, indices = batch
        name = list(self.val_metrics.keys())[dataloader_idx]
        # an eager CPU pass embeds a few faces at a time (in cache); a compiled backbone keeps the batch's shape
        micro_batch = CPU_MICRO_BATCH if images.device.type == "cpu" and self.compiled_calls is None else None
        self.val_metrics[name].update(flip_fused_embeddings(self.embed, images, self.hparams.val_flip, micro_batch),
                                      indices)

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
