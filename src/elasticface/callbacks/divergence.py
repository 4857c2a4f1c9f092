"""Divergence is a failure: a non-finite loss or gradient stops the run before it reaches the weights.

Checked after backward and before the optimizer step (and before gradient clipping, which would
spread one NaN over every gradient), so the weights, the last checkpoint and summary.json never hold
NaN. `skip_budget` steps may instead be skipped (no parameter moves: every gradient is dropped) and
counted as `train/skipped_nonfinite_steps`. Under DDP the decision reads the all-reduced gradients,
so every rank decides the same.

Without a host synchronisation in the step: with a fused optimizer (`optimizer.fused=true`, SGD, Adam,
AdamW) the finiteness flag stays on the device and is handed to the optimizer as `found_inf`, so a bad
step moves nothing, as under a GradScaler; the flag and the first bad step are read back only where the
host reads anyway: on logging steps, before a checkpoint is written, before validation and at the end.
Other optimizers are checked on the host every step (one synchronisation per step).
"""

from __future__ import annotations

import logging
import math

import pytorch_lightning as pl
import torch
from torch import Tensor

from elasticface.utils.lightning_private import should_update_logs

log = logging.getLogger(__name__)


def nonfinite_weights(module: torch.nn.Module) -> list[str]:
    """Names of parameters and normalisation statistics holding NaN or inf (a NaN-by-design
    bookkeeping buffer such as `best_acc_mean` before the first validation is not a weight)."""
    named = list(module.named_parameters()) + [(n, b) for n, b in module.named_buffers() if "running_" in n]
    return [name for name, t in named if t.is_floating_point() and not bool(torch.isfinite(t).all())]


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer.step()` honours a device-side `found_inf` flag (torch's fused SGD, Adam, AdamW)."""
    groups = optimizer.param_groups
    if not groups or not all(g.get("fused") for g in groups):
        return False
    if isinstance(optimizer, torch.optim.SGD):
        return all(g.get("dampening", 0) == 0 for g in groups)  # see `zero_momentum`
    return isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))


def zero_momentum(optimizer: torch.optim.Optimizer) -> None:
    """Start fused SGD's momentum buffers at zero: torch allocates them uninitialised on the first step and
    leaves them so when that step is skipped through `found_inf`. With dampening 0, a zero buffer gives
    exactly SGD's first step (buf = grad)."""
    if not isinstance(optimizer, torch.optim.SGD):
        return
    for group in optimizer.param_groups:
        if group.get("momentum", 0):
            for p in group["params"]:
                state = optimizer.state[p]
                if state.get("momentum_buffer") is None:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)


class DivergenceGuard(pl.Callback):
    def __init__(self, skip_budget: int = 0) -> None:
        if skip_budget < 0:
            raise ValueError(f"train.skip_nonfinite_steps={skip_budget}: must be >= 0")
        self.skip_budget = int(skip_budget)
        self.skipped = 0
        self._loss: Tensor | None = None
        # on the device: bad steps so far, the first bad step's number and checks (loss, gradient norms)
        self._bad: Tensor | None = None
        self._first_step: Tensor | None = None
        self._first_checks: Tensor | None = None
        self._names: list[str] = []
        self._params: list[tuple[str, torch.nn.Parameter]] | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._params = None  # the module's parameters, listed at the first step

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        self._loss = loss.detach()

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # fp16 AMP: an overflowing gradient is routine, and the GradScaler skips that step itself
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        if self._params is None:
            self._params = list(pl_module.named_parameters())
        grads = [] if scaler is not None else [(name, p.grad) for name, p in self._params if p.grad is not None]
        loss = self._loss if self._loss is not None else torch.zeros(())
        checks = loss.detach().float().reshape(1)
        if grads:  # one multi-tensor kernel for every gradient's norm
            checks = torch.cat(
                [checks, torch.stack(torch._foreach_norm([g for _, g in grads])).float().to(loss.device)]
            )
        names = [name for name, _ in grads]
        optimizer = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer wraps the torch one
        if scaler is None and skips_on_device(optimizer):
            self._flag_on_device(trainer, optimizer, checks, names)
            return
        if bool(torch.isfinite(checks).all()):  # one host sync per step
            return
        self._diverged(trainer, pl_module, trainer.global_step, checks, names, optimizer)

    def _flag_on_device(
        self, trainer: pl.Trainer, optimizer: torch.optim.Optimizer, checks: Tensor, names: list[str]
    ) -> None:
        bad = ~torch.isfinite(checks).all()
        if self._bad is None or self._first_checks is None or self._first_checks.shape != checks.shape:
            zero_momentum(optimizer)
            self._bad = torch.zeros((), dtype=torch.int64, device=checks.device)
            self._first_step = torch.full((), -1, dtype=torch.int64, device=checks.device)
            self._first_checks = torch.zeros_like(checks)
            self._names = names
        first = bad & (self._bad == 0)
        self._first_step = torch.where(first, torch.full_like(self._first_step, trainer.global_step), self._first_step)
        self._first_checks = torch.where(first, checks, self._first_checks)
        self._bad += bad
        optimizer.found_inf = bad.float()  # the fused kernel leaves parameters and state alone when set

    def read_flags(self, trainer: pl.Trainer, pl_module: pl.LightningModule, can_log: bool = False) -> None:
        """Read the device-side flags (one synchronisation): skip within budget, else stop naming the step."""
        if self._bad is None:
            return
        count = int(self._bad)
        if not count:
            return
        step, checks = int(self._first_step), self._first_checks.clone()
        self._bad.zero_()
        self._first_step.fill_(-1)
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        self._diverged(
            trainer, pl_module, step, checks, self._names, optimizer, count=count, applied=True, can_log=can_log
        )

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        if should_update_logs(trainer):
            self.read_flags(trainer, pl_module, can_log=True)

    def check_weights(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A finite loss and gradient can still leave weights or BatchNorm statistics non-finite (a huge lr's
        update overflows, or the forward pass of the next batch does): stop before validation or a checkpoint."""
        broken = nonfinite_weights(pl_module)
        if broken:
            shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
            raise TrainingDiverged(
                f"training diverged at step {trainer.global_step} (epoch {trainer.current_epoch}): {len(broken)} "
                f"weights or statistics are not finite ({shown}) though the loss and gradients were. Lower "
                "optimizer.lr, keep model.clip_grad_norm; the last checkpoint holds finite weights."
            )

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        self.read_flags(trainer, pl_module)  # never a checkpoint written after an unread bad step
        self.check_weights(trainer, pl_module)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.read_flags(trainer, pl_module)
        self.check_weights(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.read_flags(trainer, pl_module, can_log=True)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.read_flags(trainer, pl_module)

    def _diverged(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        step: int,
        checks: Tensor,
        names: list[str],
        optimizer: torch.optim.Optimizer | None,
        count: int = 1,
        applied: bool = False,
        can_log: bool = True,
    ) -> None:
        """Report `count` non-finite steps, the first at `step`: skip them within the budget or stop.
        `applied`: the optimizer already skipped them on the device."""
        values = checks.float().cpu().tolist()
        loss_value, grads = values[0], dict(zip(names, values[1:]))
        bad = [name for name, n in grads.items() if not math.isfinite(n)]
        what = []
        if not math.isfinite(loss_value):
            what.append(f"loss = {loss_value}")
        if bad:
            shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
            what.append(f"non-finite gradient in {len(bad)} of {len(grads)} parameters ({shown})")
        message = f"training diverged at step {step} (epoch {trainer.current_epoch}): " + "; ".join(what)
        if count > 1:
            message += f" (and {count - 1} more such steps since the last check)"
        if self.skipped + count <= self.skip_budget:
            self.skipped += count
            if not applied and optimizer is not None:
                optimizer.zero_grad(set_to_none=True)  # optimizers leave parameters without a gradient alone
            broken = nonfinite_weights(pl_module)
            if broken:  # e.g. BatchNorm statistics of a NaN batch: skipping cannot undo the forward pass
                raise TrainingDiverged(
                    f"{message}; the forward pass already made buffers non-finite "
                    f"({', '.join(broken[:3])}), so the step cannot be skipped"
                )
            log.warning(
                "%s; step skipped (%d of train.skip_nonfinite_steps=%d)", message, self.skipped, self.skip_budget
            )
            if can_log:
                pl_module.log("train/skipped_nonfinite_steps", float(self.skipped), on_step=True)
            return
        budget = (
            f"the {self.skip_budget} skippable steps (train.skip_nonfinite_steps) are used up"
            if self.skip_budget
            else "set train.skip_nonfinite_steps=N to skip up to N such steps"
        )
        raise TrainingDiverged(
            f"{message}. The weights were not updated; the last checkpoint holds finite weights. "
            f"Lower optimizer.lr, keep model.clip_grad_norm, check the data; {budget}."
        )

    def state_dict(self) -> dict[str, int]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
