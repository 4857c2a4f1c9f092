"""The parts of a fine-tune that change training itself, as one callback in the manner of Lightning's
BaseFinetuning (which freezes and unfreezes modules and adds their optimizer groups): the config's `finetune.*`.

- `imprint_centers`: before the first step of a run that does not resume, the class centres are set to the loaded
  backbone's class means (finetune/imprint.py), with a progress line every tenth or 30 s;
- `head_only_epochs`: for that many epochs (in steps) the backbone is held as loaded, in eval mode and without
  gradients, while the class centres and head train (finetune/head_only.py); then everything trains;
- `freeze_backbone_bn`: the backbone's BatchNorm layers stay in eval mode, keeping the loaded running statistics;
- `backbone_lr_scale`: the backbone's parameters form their own optimizer group at optimizer.lr x the scale;
- `l2sp_alpha`: L2-SP pulls the backbone toward the loaded weights (finetune/l2sp.py), in place of its weight decay;
- `wise_alpha`: after the last step the loaded weights are mixed back in, WiSE-FT (finetune/wise.py), so the final
  verification, the checkpoints and exports hold the mix.
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from torch import nn

from elasticface.finetune.config import RECIPE, recipe_overrides
from elasticface.finetune.domain import domain_advice
from elasticface.finetune.head_only import head_only_steps
from elasticface.finetune.imprint import imprint_centers
from elasticface.finetune.l2sp import StartPoint
from elasticface.finetune.wise import LoadedWeights
from elasticface.utils.lightning_private import should_update_logs
from elasticface.utils.progress import Progress
from elasticface.utils.speed import eagerly

log = logging.getLogger(__name__)


class FineTuning(pl.Callback):
    def __init__(self, imprint_centers: bool = False, head_only_epochs: float = 0.0, backbone_lr_scale: float = 1.0,
                 freeze_backbone_bn: bool = False, l2sp_alpha: float = 0.0, wise_alpha: float = 1.0) -> None:
        self.imprint = bool(imprint_centers)
        self.head_only_epochs = float(head_only_epochs)
        self.backbone_lr_scale = float(backbone_lr_scale)
        self.freeze_bn = bool(freeze_backbone_bn)
        self.alpha = float(l2sp_alpha)
        self.wise_alpha = float(wise_alpha)
        self.head_only_steps = 0
        self.holding = False  # the backbone is held as loaded (the head-only phase)
        self.start_point: StartPoint | None = None
        self.loaded: LoadedWeights | None = None  # kept for the WiSE-FT mix until the last step has run

    @property
    def changes_training(self) -> bool:
        """Whether any part is on (a run without one needs no such callback)."""
        return self.imprint or self.head_only_epochs > 0 or self.backbone_lr_scale != 1.0 or self.freeze_bn \
            or self.alpha > 0 or self.wise_alpha != 1.0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Before the optimizer is built, and before a checkpoint is restored: the backbone's optimizer group, and
        the loaded weights L2-SP pulls toward and WiSE-FT mixes back in."""
        if stage != "fit":
            return
        options: dict[str, float] = {}
        if self.backbone_lr_scale != 1.0:
            options["lr_scale"] = self.backbone_lr_scale
        if self.alpha > 0:
            options["weight_decay"] = 0.0  # the pull toward w0 replaces the pull toward zero
            self.start_point = StartPoint(pl_module.backbone)
        if self.wise_alpha != 1.0:
            self.loaded = LoadedWeights(pl_module.backbone)
        if options:
            pl_module.param_group_options["backbone"] = options

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        steps_per_epoch = trainer.num_training_batches / max(1, trainer.accumulate_grad_batches)
        self.head_only_steps = head_only_steps(self.head_only_epochs, steps_per_epoch,
                                               trainer.estimated_stepping_batches)
        if self.start_point is not None:
            self.start_point.to(pl_module.device)
        if trainer.ckpt_path is None and trainer.is_global_zero:
            self._say_domain(trainer)
        if self.imprint and trainer.ckpt_path is None:  # a resumed run's centres come from its checkpoint
            datamodule = trainer.datamodule
            with Progress(f"imprinting the centres of {datamodule.num_classes} classes: the loaded backbone's class "
                          "means", len(datamodule.train_set)) as progress, eagerly():  # the backbone's own numbers
                imprint_centers(pl_module, datamodule.train_set, datamodule.val_batch_size, datamodule.image_size,
                                progress.advance)
                progress.done()

    def _say_domain(self, trainer: pl.Trainer) -> None:
        """Before step 1 of the recipe: one line when the training faces look like a domain measured apart, with its
        best keys against this run's (finetune/domain.py)."""
        if recipe_overrides() is None:
            return
        line = domain_advice(trainer.datamodule.train_set,
                             {"trainer.max_epochs": trainer.max_epochs, "finetune.wise_alpha": self.wise_alpha})
        if line:
            log.info("finetune=%s: %s", RECIPE, line)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._freeze_batchnorm(pl_module.backbone)  # Lightning puts the module in train mode as fitting starts

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        holding = trainer.global_step < self.head_only_steps
        if holding != self.holding:
            self._hold(pl_module.backbone, holding)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """After the last optimizer step, before the validation that ends the run: the WiSE-FT mix, once. A run that
        stops earlier (a time limit, a preemption, divergence) keeps the weights it trained."""
        if self.loaded is None or trainer.global_step < trainer.estimated_stepping_batches:
            return
        self.loaded.mix_into(pl_module.backbone, self.wise_alpha)
        self.loaded = None
        log.info("finetune.wise_alpha=%g: after step %d the backbone is %g x the fine-tuned weights + %g x the "
                 "loaded ones (WiSE-FT); verification, checkpoints and exports hold the mix", self.wise_alpha,
                 trainer.global_step, self.wise_alpha, 1 - self.wise_alpha)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.start_point is None or self.holding:
            return
        logging = should_update_logs(trainer)
        penalty = self.start_point.pull(pl_module.backbone, self.alpha / max(1, trainer.accumulate_grad_batches),
                                        penalty=logging)
        if logging:
            pl_module.log("train/l2sp_penalty", penalty * max(1, trainer.accumulate_grad_batches), on_step=True)

    def _hold(self, backbone: nn.Module, holding: bool) -> None:
        """Hold the backbone as loaded (eval mode, no gradients) or let it train again."""
        backbone.train(not holding)
        backbone.requires_grad_(not holding)
        if not holding:
            self._freeze_batchnorm(backbone)
        self.holding = holding

    def _freeze_batchnorm(self, backbone: nn.Module) -> None:
        if self.freeze_bn:
            for module in backbone.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
