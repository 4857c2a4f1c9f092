"""FaceRecognitionModule: backbone -> embedding -> class layer (centres, margin head, cross-entropy).

The module is built from plain config dicts (saved as hyperparameters), so `load_from_checkpoint(path)`
rebuilds the exact model with no Hydra and no extra arguments, which eval.py and export rely on.

The class layer is :class:`elasticface.classifier.Classifier`: the step calls it once and logs what it
returns; sharded centres (`model=model_parallel`) and their checkpoint gather/slice live there too.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.accelerators import CPUAccelerator
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
import torch.nn.functional as F
from torch import Tensor, nn

from elasticface.classifier import Classifier, ClassifierOutput, FullFC
from elasticface.utils.distributed import rank_and_world
from elasticface.data.faults import too_small_to_train
from elasticface.finetune.head_only import head_only_steps
from elasticface.finetune.l2sp import StartPoint
from elasticface.heads.base import MarginHead
from elasticface.margin_schedule import MarginSchedule
from elasticface.metrics.verification import VerificationAccuracy, flip_fused_embeddings
from elasticface.utils.lightning_private import attached_trainer, should_update_logs
from elasticface.utils.speed import (CompiledCalls, check_channels_last_setting, check_compile_backend,
                                     check_compile_mode, check_compile_setting, compile_available, compile_in_place,
                                     should_compile, should_use_channels_last)
from elasticface.untrusted import build_from_checkpoint

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
        backbone_lr_scale: float = 1.0,
        freeze_backbone_bn: bool = False,
        compile: bool | str = False,
        compile_backend: str = "inductor",
        compile_mode: str = "default",
        channels_last: bool | str = False,
        margin_schedule: dict | None = None,
        imprint_centers: bool = False,
        head_only_epochs: float = 0.0,
        l2sp_alpha: float = 0.0,
    ) -> None:
        super().__init__()
        for key, value in (("backbone_lr_scale", backbone_lr_scale), ("head_only_epochs", head_only_epochs),
                           ("l2sp_alpha", l2sp_alpha)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"model.{key}={value!r}: expected a number >= 0")
        backbone, head, centers, optimizer, scheduler, classifier, margin_schedule = map(
            _as_container, (backbone, head, centers, optimizer, scheduler, classifier, margin_schedule))
        self.margin_schedule = MarginSchedule(**(margin_schedule or {}))
        self._margin_steps = 0  # the schedule's length in this run's steps, set when fitting starts
        self.save_hyperparameters(logger=False)  # train.py logs the whole resolved config instead
        self.backbone: nn.Module = instantiate(backbone)
        head_module = instantiate(head)
        if not isinstance(head_module, MarginHead):
            raise ValueError(f"model.head: {head.get('_target_')!r} builds a {type(head_module).__name__}, "
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
        # training steps whose backbone ran the compiled graph, and those that ran it eagerly, in this process
        self.steps_compiled = 0
        self.steps_eager = 0
        self.val_metrics = nn.ModuleDict()
        self.register_buffer("best_acc_mean", torch.tensor(float("nan"), dtype=torch.float64))
        self.validated_at_step: int | None = None
        self._theta_y: Tensor | None = None
        self._theta_valid: Tensor | None = None
        self._margins: Tensor | None = None
        self._skipped_records: Tensor | None = None
        # fine-tuning (elasticface.finetune): the loaded weights L2-SP pulls toward, and the head-only steps
        self.start_point: StartPoint | None = None
        self._head_only_steps = 0

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

    def keep_start_weights(self) -> None:
        """Remember the backbone's weights as loaded: model.l2sp_alpha pulls toward them."""
        self.start_point = StartPoint(self.backbone)

    def head_only(self) -> bool:
        """Whether this step trains only the class centres and head (model.head_only_epochs): the backbone is
        held as loaded, in eval mode, and embeds without a graph."""
        return self.global_step < self._head_only_steps

    # -- training ------------------------------------------------------------------------------------
    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor | None:
        images, labels = batch[0], batch[1]
        if too_small_to_train(images):  # too few records left readable; counted by the DataModule
            return None
        margin_weight = self.margin_schedule.weight(self.global_step, self._margin_steps)
        calls = self.compiled_calls.calls if self.compiled_calls is not None else 0
        if self.head_only():
            self.backbone.eval()
            with torch.no_grad():
                embeddings = self.embed(images)
        else:
            if not self.backbone.training:  # the first step after the head-only phase
                self.train()
            embeddings = self.embed(images)
        self._count_backbone_run(calls)
        out = self.classifier(embeddings, labels, margin_weight=margin_weight)
        loss = out.loss
        alpha = float(self.hparams.get("l2sp_alpha") or 0.0)
        if alpha > 0 and not self.head_only():
            penalty = self.start_point.penalty(self.backbone, alpha)
            loss = loss + penalty
            if self.logging_step:
                self.log("train/l2sp_penalty", penalty.detach(), on_step=True)
        # Per-step values only on the steps the loggers write: each `self.log` costs Lightning about a
        # millisecond of Python, and a progress-bar value a host sync (the bar reads train/loss itself).
        if self.logging_step:
            if out.aux is not None:
                self.log("train/aux_loss", out.aux.detach(), on_step=True)
            self.log("train/loss", out.loss.detach(), on_step=True)
            if self.margin_schedule.kind != "none":
                self.log("train/margin_weight", margin_weight, on_step=True)
        self.log_batch_stats(out, batch, embeddings)
        return loss

    def _count_backbone_run(self, calls_before: int) -> None:
        """Count whether this training step's backbone ran its compiled graph; the first step that did not
        says so (the run goes on, slower, and summary.json's `compiled` reads false)."""
        if self.compiled_calls is None:
            return
        if self.compiled_calls.calls > calls_before:
            self.steps_compiled += 1
            return
        self.steps_eager += 1
        if self.steps_eager == 1:
            log.warning("model.compile: training step %d ran the backbone EAGERLY although it is compiled (no call "
                        "into its graph: torch %s may have skipped the compiled frame, see docs/compile.md); the run "
                        "goes on and summary.json records compiled=false", self.global_step, torch.__version__)

    @property
    def ran_compiled(self) -> bool:
        """Whether every training step of this process ran the backbone's compiled graph (counted)."""
        return self.compiled_calls is not None and self.steps_compiled > 0 and self.steps_eager == 0

    @property
    def logging_step(self) -> bool:
        """Whether this training step's logged values reach the loggers (`trainer.log_every_n_steps`)."""
        trainer = attached_trainer(self)
        return trainer is None or should_update_logs(trainer)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Lightning's step, then the gradients dropped at once. Lightning clears them only inside the next
        step, after its forward: one whole set of gradients (the centres' [C, D] among them: 3.8 GiB at 2M classes)
        would stay alive beside that forward's activations, where a step's memory can peak (docs/speed.md)."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer.zero_grad(set_to_none=True)

    def on_fit_start(self) -> None:
        """The margin schedule's and the head-only phase's lengths in this run's steps; an impossible one stops
        here, before the first step."""
        total = self.trainer.estimated_stepping_batches
        self._margin_steps = self.margin_schedule.length(total)
        steps_per_epoch = self.trainer.num_training_batches / max(1, self.trainer.accumulate_grad_batches)
        self._head_only_steps = head_only_steps(float(self.hparams.get("head_only_epochs") or 0.0), steps_per_epoch,
                                                total)
        if float(self.hparams.get("l2sp_alpha") or 0.0) > 0 and self.start_point is None:
            raise ValueError(f"model.l2sp_alpha={self.hparams.l2sp_alpha:g} pulls the backbone toward the weights it "
                             f"was loaded from, but none were loaded: give weights=<file> (or model.l2sp_alpha=0)")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """On logging steps: the gradient norms reaching the backbone and the class centres, before clipping (a
        margin head that stalls shows it here first)."""
        if not self.logging_step:
            return
        for name, module in (("backbone", self.backbone), ("centers", self.centers)):
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            if grads:
                norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
                self.log(f"train/grad_norm_{name}", norm, on_step=True)

    def on_train_epoch_end(self) -> None:
        if self._skipped_records is not None:
            self.log("data/skipped_records", self._skipped_records, on_step=False, on_epoch=True, reduce_fx="sum",
                     sync_dist=True)
            self._skipped_records = None

    def log_batch_stats(self, out: ClassifierOutput, batch: tuple[Tensor, ...], embeddings: Tensor | None = None
                        ) -> None:
        """Margins drawn this step, the target angles and logits, and records the loader had to drop.

        Keeping only rows with a label (a boolean mask) syncs the device with the host, so the step
        stores all rows and the statistics are computed only on the steps the loggers write.
        """
        if self.head.normalized:
            self._theta_y, self._theta_valid = out.theta_y, out.valid
        self._margins = out.margins
        if len(batch) > 2 and isinstance(batch[2], Tensor):  # summed on the device, logged at the epoch's end
            skipped = batch[2].float().sum()
            self._skipped_records = skipped if self._skipped_records is None else self._skipped_records + skipped
        if not self.logging_step:
            return
        theta_y = self.last_theta_y
        if theta_y is None and embeddings is not None:
            theta_y = self._softmax_theta_y(embeddings, batch[1])
        if theta_y is not None and theta_y.numel():
            degrees = torch.rad2deg(theta_y)
            self.log("train/theta_y_mean_deg", degrees.mean(), on_step=True)
            if theta_y.numel() > 1:
                self.log("train/theta_y_std_deg", degrees.std(), on_step=True)
            self.log("train/target_logit_mean", out.target_logit[out.valid].mean(), on_step=True)
            if self.head.angular_margin is not None:  # past π, cos(θ_y + m) turns back up: insightface's "easy margin"
                m = self.last_margins if self._margins is not None else self.head.angular_margin
                self.log("train/share_theta_plus_m_over_pi", (theta_y + m > math.pi).float().mean(), on_step=True)
        margins = out.valid_margins
        if margins is not None and margins.numel() > 1:
            self.log("train/margin_mean", margins.mean(), on_step=True)
            self.log("train/margin_std", margins.std(), on_step=True)

    def _softmax_theta_y(self, embeddings: Tensor, labels: Tensor) -> Tensor | None:
        """Plain softmax's angle between each embedding and its class's weight row (its logits are raw inner
        products), so its curve sits beside the margin heads'; only with every class's centre in this process."""
        centers = self.centers
        if type(centers) is not FullFC or centers.centers_per_class != 1:  # not sampled, sharded or sub-centred
            return None
        with torch.no_grad():
            rows = centers.weight[labels.long()].float()
            return torch.acos(F.cosine_similarity(embeddings.detach().float(), rows, dim=1).clamp(-1.0, 1.0))

    @property
    def last_margins(self) -> Tensor | None:
        """Per-sample margins the head applied in the last training batch (rows with a label), if it has any."""
        if self._margins is None or self._theta_valid is None:
            return self._margins
        return self._margins[self._theta_valid]

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
        """The backbone at optimizer.lr x backbone_lr_scale, everything else (class centres, head) at optimizer.lr;
        with L2-SP (model.l2sp_alpha) the backbone has no weight decay: the penalty pulls it toward its start."""
        scale = float(self.hparams.get("backbone_lr_scale", 1.0))
        l2sp = float(self.hparams.get("l2sp_alpha") or 0.0) > 0
        if scale == 1.0 and not l2sp:
            return [{"params": list(self.parameters())}]
        backbone = list(self.backbone.parameters())
        ids = {id(p) for p in backbone}
        rest = [p for p in self.parameters() if id(p) not in ids]
        group = {"params": backbone, "lr": float(self.hparams.optimizer["lr"]) * scale, "name": "backbone"}
        return [group | ({"weight_decay": 0.0} if l2sp else {}), {"params": rest, "name": "centers_head"}]

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
        if stage == "fit" and self.compiled_calls is None and should_compile(self.compile_setting, training_on_cpu) \
                and compile_available(self.backbone):
            self.compiled_calls = compile_in_place(self.backbone, self.compile_backend, self.compile_mode,
                                                   "cpu" if training_on_cpu else "cuda")
        if not self.channels_last and should_use_channels_last(self.channels_last_setting, training_on_cpu,
                                                               self.compiled_calls is not None):
            self.use_channels_last()
        datamodule = getattr(self.trainer, "datamodule", None)
        for name, pairs in (getattr(datamodule, "val_sets", None) or {}).items():
            if name not in self.val_metrics:
                allow_partial = partial_validation(self.trainer)
                self.val_metrics[name] = VerificationAccuracy(pairs.issame, allow_partial=allow_partial)

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
