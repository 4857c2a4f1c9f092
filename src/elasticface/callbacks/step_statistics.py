"""What a training step did, on the steps the loggers write: the loss, the angles θ_y between the embeddings and
their class centres, the target logits, the margins drawn, the gradient norms; and the records the loader dropped.

Read from what `training_step` returns (the class layer's output, the embeddings, the margin weight). Picking the
rows with a label is a boolean mask, which syncs the device with the host, and each `log` costs Lightning about a
millisecond of Python: so nothing is computed on the other steps. A margin head that stalls shows here first
(θ_y stuck near 90°, the share of θ_y + m past π); plain softmax, whose logits are raw inner products, gets its
angle from its weight rows so that its curve sits beside the margin heads'.
"""

from __future__ import annotations

import math
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor

from elasticface.classifier import ClassifierOutput, FullFC
from elasticface.utils.lightning_private import should_update_logs


def softmax_theta_y(pl_module: pl.LightningModule, embeddings: Tensor, labels: Tensor) -> Tensor | None:
    """Plain softmax's angle between each embedding and its class's weight row, with every class's centre in this
    process (not sampled, sharded or sub-centred); None otherwise."""
    centers = pl_module.centers
    if type(centers) is not FullFC or centers.centers_per_class != 1:
        return None
    with torch.no_grad():
        rows = centers.weight[labels.long()].float()
        return torch.acos(F.cosine_similarity(embeddings.float(), rows, dim=1).clamp(-1.0, 1.0))


class StepStatistics(pl.Callback):
    """Logs `train/loss`, `train/aux_loss`, `train/margin_weight`, `train/theta_y_mean_deg`, `train/theta_y_std_deg`,
    `train/target_logit_mean`, `train/share_theta_plus_m_over_pi`, `train/margin_mean`, `train/margin_std` and
    `train/grad_norm_{backbone,centers}` on logging steps, and `data/skipped_records` per epoch."""

    def __init__(self) -> None:
        self._skipped: Tensor | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if len(batch) > 2 and isinstance(batch[2], Tensor):  # summed on the device, logged at the epoch's end
            skipped = batch[2].float().sum()
            self._skipped = skipped if self._skipped is None else self._skipped + skipped
        if not isinstance(outputs, dict) or outputs.get("classifier") is None or not should_update_logs(trainer):
            return  # a batch the module skipped (too few readable records), or a step the loggers do not write
        out: ClassifierOutput = outputs["classifier"]
        log = pl_module.log
        if out.aux is not None:
            log("train/aux_loss", out.aux.detach(), on_step=True)
        log("train/loss", out.loss.detach(), on_step=True)
        if pl_module.margin_schedule.kind != "none":
            log("train/margin_weight", outputs["margin_weight"], on_step=True)
        head = pl_module.head
        theta_y = out.theta_y[out.valid] if head.normalized else softmax_theta_y(pl_module, outputs["embeddings"],
                                                                                   batch[1])
        if theta_y is not None and theta_y.numel():
            degrees = torch.rad2deg(theta_y)
            log("train/theta_y_mean_deg", degrees.mean(), on_step=True)
            if theta_y.numel() > 1:
                log("train/theta_y_std_deg", degrees.std(), on_step=True)
            log("train/target_logit_mean", out.target_logit[out.valid].mean(), on_step=True)
            if head.angular_margin is not None:  # past π, cos(θ_y + m) turns back up: insightface's "easy margin"
                m = last_margins(out) if out.margins is not None else head.angular_margin
                log("train/share_theta_plus_m_over_pi", (theta_y + m > math.pi).float().mean(), on_step=True)
        margins = out.valid_margins
        if margins is not None and margins.numel() > 1:
            log("train/margin_mean", margins.mean(), on_step=True)
            log("train/margin_std", margins.std(), on_step=True)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """The gradient norms reaching the backbone and the class centres, before clipping."""
        if not should_update_logs(trainer):
            return
        for name, module in (("backbone", pl_module.backbone), ("centers", pl_module.centers)):
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            if grads:
                norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
                pl_module.log(f"train/grad_norm_{name}", norm, on_step=True)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._skipped is not None:
            pl_module.log("data/skipped_records", self._skipped, on_step=False, on_epoch=True, reduce_fx="sum",
                          sync_dist=True)
            self._skipped = None


def last_margins(out: ClassifierOutput) -> Tensor | None:
    """The per-sample margins of the rows with a label (what the head applied), if the head draws any."""
    return out.margins if out.margins is None else out.margins[out.valid]
