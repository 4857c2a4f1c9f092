"""What a training step did, on the steps the loggers write: the loss, the angles θ_y between the embeddings and
their class centres, the target logits, the margins drawn, the gradient norms; and the records the loader dropped.

Read from what `training_step` returns (the class layer's output, the embeddings, the margin weight). Picking the
rows with a label is a boolean mask, which syncs the device with the host: so nothing is computed on the other
steps. A margin head that stalls shows here first
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
from elasticface.utils.lightning_private import log_step_metrics, should_update_logs


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
    `train/grad_norm_{backbone,centers}` on logging steps, and `data/skipped_records` per epoch.

    A logging step's values are read from the device together (one synchronisation) and written to the loggers and
    `trainer.callback_metrics` at once (utils/lightning_private.py's log_step_metrics): through `LightningModule.log`
    each value costs Lightning about 0.2 ms of bookkeeping, most of a logging step's price on a CPU."""

    def __init__(self) -> None:
        self._skipped: Tensor | None = None
        self._grad_norms: dict[str, Tensor] = {}

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """The gradient norms reaching the backbone and the class centres, before clipping."""
        if not should_update_logs(trainer):
            return
        for name, module in (("backbone", pl_module.backbone), ("centers", pl_module.centers)):
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            if grads:
                self._grad_norms[f"train/grad_norm_{name}"] = torch.linalg.vector_norm(
                    torch.stack(torch._foreach_norm(grads)).float())

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if len(batch) > 2 and isinstance(batch[2], Tensor):  # summed on the device, logged at the epoch's end
            skipped = batch[2].float().sum()
            self._skipped = skipped if self._skipped is None else self._skipped + skipped
        if not isinstance(outputs, dict) or outputs.get("classifier") is None or not should_update_logs(trainer):
            self._grad_norms = {}
            return  # a batch the module skipped (too few readable records), or a step the loggers do not write
        values = {**self._grad_norms, **step_values(pl_module, outputs, batch[1])}
        self._grad_norms = {}
        numbers = torch.stack([torch.as_tensor(v, dtype=torch.float32).to(values["train/loss"].device)
                               for v in values.values()]).tolist()
        log_step_metrics(trainer, dict(zip(values, numbers)))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._skipped is not None:
            pl_module.log("data/skipped_records", self._skipped, on_step=False, on_epoch=True, reduce_fx="sum",
                          sync_dist=True)
            self._skipped = None


def step_values(pl_module: pl.LightningModule, outputs: dict[str, Any], labels: Tensor) -> dict[str, Tensor]:
    """The step's statistics from what `training_step` returned, as 0-d tensors on the device."""
    out: ClassifierOutput = outputs["classifier"]
    values: dict[str, Any] = {}
    if out.aux is not None:
        values["train/aux_loss"] = out.aux.detach()
    values["train/loss"] = out.loss.detach()
    if pl_module.margin_schedule.kind != "none":
        values["train/margin_weight"] = outputs["margin_weight"]
    head = pl_module.head
    theta_y = out.theta_y[out.valid] if head.normalized else softmax_theta_y(pl_module, outputs["embeddings"], labels)
    if theta_y is not None and theta_y.numel():
        degrees = torch.rad2deg(theta_y)
        values["train/theta_y_mean_deg"] = degrees.mean()
        if theta_y.numel() > 1:
            values["train/theta_y_std_deg"] = degrees.std()
        values["train/target_logit_mean"] = out.target_logit[out.valid].mean()
        if head.angular_margin is not None:  # past π, cos(θ_y + m) turns back up: insightface's "easy margin"
            m = last_margins(out) if out.margins is not None else head.angular_margin
            values["train/share_theta_plus_m_over_pi"] = (theta_y + m > math.pi).float().mean()
    margins = out.valid_margins
    if margins is not None and margins.numel() > 1:
        values["train/margin_mean"] = margins.mean()
        values["train/margin_std"] = margins.std()
    return values


def last_margins(out: ClassifierOutput) -> Tensor | None:
    """The per-sample margins of the rows with a label (what the head applied), if the head draws any."""
    return out.margins if out.margins is None else out.margins[out.valid]
