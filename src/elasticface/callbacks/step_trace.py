"""StepTrace: what each training step of a run computed, so that two runs can be compared step by step.

Two runs from the same seed and initial weights (eager and compiled, say) should see the same batches and
compute the same loss, gradients, BatchNorm running statistics and learning rate at every step. The trace
records all of them, plus how each validation ran (the backbone's mode, compiled or not, its accuracy) and
how many graphs torch.compile built, so a difference shows at the first step and quantity where it appears.

    python train.py +callbacks.step_trace._target_=elasticface.callbacks.step_trace.StepTrace \
        +callbacks.step_trace.path=trace.pt

`perturb` multiplies every backbone weight by (1 ± perturb) (signs from a fixed generator) before the first
step: with perturb = 2**-23 (one float32 rounding) it measures how far two runs that differ only by rounding
drift apart, the envelope an equivalent compiled run must stay within. `benchmarks/bench_compile.py` prints
the comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn


def bn_running_stats(module: nn.Module) -> Tensor:
    """Every BatchNorm running mean and variance of `module`, concatenated (float64, on the CPU)."""
    parts = [t.detach().double().flatten().cpu() for m in module.modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None
             for t in (m.running_mean, m.running_var)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def graphs_compiled() -> int:
    """How many graphs torch.compile has built in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class StepTrace(pl.Callback):
    """Per step: checksums of the batch, loss, backbone gradient norm (before clipping), learning rate,
    BatchNorm running statistics. Per validation: backbone mode, compiled or not, val/acc_mean.
    It syncs with the device every step: a diagnostic, not for production runs."""

    def __init__(self, path: str | None = None, perturb: float = 0.0) -> None:
        self.path = path
        self.perturb = float(perturb)
        self.columns: dict[str, list[Any]] = {k: [] for k in ("step", "images_sum", "labels", "loss", "grad_norm",
                                                                 "lr", "bn_stats")}
        self.validations: dict[str, list[Any]] = {k: [] for k in ("step", "training", "compiled", "acc_mean")}
        self._graphs_at_start = 0
        self._calls_at_validation = 0

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._graphs_at_start = graphs_compiled()
        if self.perturb and trainer.global_step == 0:
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in pl_module.backbone.parameters():
                    sign = torch.randint(0, 2, p.shape, generator=gen).to(p) * 2 - 1
                    p.mul_(1 + self.perturb * sign)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        images, labels = batch[0], batch[1]
        self.columns["step"].append(trainer.global_step)
        self.columns["images_sum"].append(float(images.double().sum()))
        self.columns["labels"].append(labels.detach().cpu().long())
        for key in ("loss", "grad_norm", "lr"):
            self.columns[key].append(float("nan"))
        self.columns["bn_stats"].append(None)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad.detach().double().norm() for p in pl_module.backbone.parameters() if p.grad is not None]
        if grads and self.columns["step"]:
            self.columns["grad_norm"][-1] = float(torch.stack(grads).norm())

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self.columns["step"] or outputs is None:
            return
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.columns["loss"][-1] = float(loss)
        self.columns["lr"][-1] = float(trainer.optimizers[0].param_groups[0]["lr"])
        self.columns["bn_stats"][-1] = bn_running_stats(pl_module.backbone)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        backbone = pl_module.backbone
        self.validations["step"].append(trainer.global_step)
        self.validations["training"].append(bool(backbone.training))
        self.validations["compiled"].append(False)  # counted at its end: whether it called the compiled graph
        self.validations["acc_mean"].append(float("nan"))
        counter = getattr(pl_module, "compiled_calls", None)
        self._calls_at_validation = counter.calls if counter is not None else 0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        counter = getattr(pl_module, "compiled_calls", None)
        if self.validations["step"] and counter is not None:
            self.validations["compiled"][-1] = counter.calls > self._calls_at_validation
        acc = trainer.callback_metrics.get("val/acc_mean")
        if self.validations["step"] and acc is not None:
            self.validations["acc_mean"][-1] = float(acc)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.path and trainer.is_global_zero:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            torch.save(self.as_tensors(), self.path)

    def as_tensors(self) -> dict[str, Tensor]:
        """The trace as plain tensors (`torch.load(path, weights_only=True)` reads it back)."""
        c, v = self.columns, self.validations
        filled = [s if s is not None else torch.full_like(c["bn_stats"][0], float("nan")) for s in c["bn_stats"]] \
            if c["bn_stats"] and c["bn_stats"][0] is not None else []
        return {
            "step": torch.tensor(c["step"], dtype=torch.long),
            "images_sum": torch.tensor(c["images_sum"], dtype=torch.float64),
            "labels": torch.nn.utils.rnn.pad_sequence(c["labels"], batch_first=True, padding_value=-1)
            if c["labels"] else torch.zeros(0, 0, dtype=torch.long),
            "loss": torch.tensor(c["loss"], dtype=torch.float64),
            "grad_norm": torch.tensor(c["grad_norm"], dtype=torch.float64),
            "lr": torch.tensor(c["lr"], dtype=torch.float64),
            "bn_stats": torch.stack(filled) if filled else torch.zeros(0, 0, dtype=torch.float64),
            "val_step": torch.tensor(v["step"], dtype=torch.long),
            "val_training": torch.tensor(v["training"], dtype=torch.bool),
            "val_compiled": torch.tensor(v["compiled"], dtype=torch.bool),
            "val_acc_mean": torch.tensor(v["acc_mean"], dtype=torch.float64),
            "graphs_compiled": torch.tensor(graphs_compiled() - self._graphs_at_start),
        }
