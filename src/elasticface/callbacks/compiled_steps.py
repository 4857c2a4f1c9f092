"""Whether each training step ran the backbone's compiled graph, counted: the setting cannot say it.

dynamo can run a compiled module eagerly with no error (a frame skipped for good after a TorchDispatchMode, the
recompile limit, `torch.compiler.set_stance`); only a call into the graph (utils/speed.py's CompiledCalls) shows
that a step ran compiled. The first step that did not says so in one line; the run goes on, slower, and
summary.json's `compiled` reads false (docs/compile.md).
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)


class CompiledSteps(pl.Callback):
    """Counts this process's training steps whose backbone called its compiled graph (`compiled`) and those that
    did not (`eager`), for a module compiled in place (`pl_module.compiled_calls`)."""

    def __init__(self) -> None:
        self.compiled = 0
        self.eager = 0
        self._calls_before = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        counter = getattr(pl_module, "compiled_calls", None)
        self._calls_before = counter.calls if counter is not None else 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        counter = getattr(pl_module, "compiled_calls", None)
        if counter is None or not outputs or outputs.get("loss") is None:  # eager by setting, or a batch skipped
            return
        if counter.calls > self._calls_before:
            self.compiled += 1
            return
        self.eager += 1
        if self.eager == 1:
            log.warning("model.compile: training step %d ran the backbone EAGERLY although it is compiled (no call "
                        "into its graph: torch %s may have skipped the compiled frame, see docs/compile.md); the run "
                        "goes on and summary.json records compiled=false", trainer.global_step - 1, torch.__version__)

    @property
    def ran_compiled(self) -> bool:
        """Whether every training step of this process ran the backbone's compiled graph."""
        return self.compiled > 0 and self.eager == 0
