"""Count device-to-host reads: every Python-level call that makes a GPU wait for the host to see a value.

On a CPU nothing waits, so the test cannot time a synchronisation; instead it counts the calls that
would force one on a GPU (`Tensor.item`, `tolist`, `bool(t)`, `float(t)`, `nonzero`, `cpu`, `numpy`,
boolean-mask indexing, `torch.unique`, ...) and records where each came from. Where CUDA exists,
`torch.cuda.set_sync_debug_mode("error")` is the device's own version of the same check.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

# methods of Tensor that read a value back to the host (on a GPU: wait for every queued kernel)
_READING_METHODS = (
    "item",
    "tolist",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__complex__",
    "nonzero",
    "cpu",
    "numpy",
    "__array__",
    "unique",
    "unique_consecutive",
    "argwhere",
    "masked_select",
    "repeat_interleave",
)
# torch.* functions whose output size depends on the data (the host must see the data to allocate it)
_READING_FUNCTIONS = ("nonzero", "masked_select", "unique", "unique_consecutive", "argwhere", "repeat_interleave")


def _is_mask(index: object) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool and p.dim() > 0 for p in parts)


@dataclass
class HostReads:
    """Reads seen while `active`, each with the source line outside torch that asked for it."""

    active: bool = False
    reads: list[tuple[str, str]] = field(default_factory=list)  # (what, where)
    frames: int = 1  # how many callers to name per read
    _depth: int = 0

    def record(self, what: str) -> None:
        if not self.active or self._depth:
            return
        frames = [
            f
            for f in traceback.extract_stack()[:-2]
            if "/torch/" not in f.filename and "host_reads.py" not in f.filename
        ]
        where = " <- ".join(
            f"{f.filename.split('site-packages/')[-1].split('/src/')[-1]}:{f.lineno} ({f.name})"
            for f in reversed(frames[-self.frames :])
        )
        self.reads.append((what, where))

    def take(self) -> list[tuple[str, str]]:
        reads, self.reads = self.reads, []
        return reads


@contextlib.contextmanager
def count_host_reads() -> Iterator[HostReads]:
    """Patch torch's reading entry points for the duration; `counter.active` switches counting on."""
    counter = HostReads()
    originals: list[tuple[object, str, object]] = []

    def wrap(owner: object, name: str, what: str, condition=None) -> None:
        original = getattr(owner, name)

        def reading(*args, **kwargs):
            if condition is None or condition(*args, **kwargs):
                counter.record(what)
            counter._depth += 1  # a read implemented by another read counts once
            try:
                return original(*args, **kwargs)
            finally:
                counter._depth -= 1

        originals.append((owner, name, original))
        setattr(owner, name, reading)

    for name in _READING_METHODS:
        wrap(torch.Tensor, name, f"Tensor.{name}")
    for name in _READING_FUNCTIONS:
        wrap(torch, name, f"torch.{name}")
    # torch.where(cond) with one argument is nonzero
    wrap(torch, "where", "torch.where(cond)", lambda *a, **k: len(a) + len(k) == 1)
    wrap(torch.Tensor, "__getitem__", "boolean-mask indexing", lambda self, index: _is_mask(index))
    wrap(
        torch.Tensor,
        "__setitem__",
        "boolean-mask assignment of a tensor",
        lambda self, index, value: _is_mask(index) and isinstance(value, torch.Tensor) and value.numel() > 1,
    )
    # `.to("cpu")` names the host; `.to(t.device)` follows the data (on this CPU it is "cpu" too, so only the
    # string counts, which is how code that means the host writes it)
    wrap(
        torch.Tensor,
        "to",
        "Tensor.to('cpu')",
        lambda self, *a, **k: any(isinstance(x, str) and x.startswith("cpu") for x in list(a) + list(k.values())),
    )
    try:
        yield counter
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


class StepReads:
    """A Lightning callback: the host reads of each training step, from its start to the next step's start,
    and whether the step wrote logs (`trainer.log_every_n_steps`), when reading what is logged is expected."""

    def __new__(cls, counter: HostReads):
        import pytorch_lightning as pl

        class _StepReads(pl.Callback):
            def __init__(self) -> None:
                self.steps: list[tuple[int, bool, list[tuple[str, str]]]] = []  # (global step, logged, reads)
                self._current: tuple[int, bool] | None = None

            def _close(self) -> None:
                counter.active = False
                if self._current is not None:
                    self.steps.append((*self._current, counter.take()))
                self._current = None
                counter.take()

            def on_train_start(self, trainer, pl_module) -> None:
                # a step ends once Lightning has written its logs (after on_train_batch_end)
                connector = trainer._logger_connector
                update = connector.update_train_step_metrics

                def update_then_close() -> None:
                    update()
                    self._close()

                connector.update_train_step_metrics = update_then_close

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
                self._close()
                self._current = (trainer.global_step, trainer._logger_connector.should_update_logs)
                counter.active = True

            def on_validation_start(self, trainer, pl_module) -> None:
                self._close()

            def on_train_epoch_end(self, trainer, pl_module) -> None:
                self._close()

            def on_train_end(self, trainer, pl_module) -> None:
                self._close()

        return _StepReads()
