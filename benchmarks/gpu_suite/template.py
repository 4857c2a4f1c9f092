"""The template's training step as `python train.py` runs it, timed for the GPU suite.

The module, Trainer, callbacks and logger are those train.py builds from the composed config
(`backbone=...`, `model=default|partial_fc`, `trainer=gpu` on a GPU), and `trainer.fit` runs the steps: so
the time is the real step (backbone in bf16 autocast, centres, head and loss in fp32, backward, backbone
gradient clipping, optimizer, scheduler, Lightning's own work per step). Differences from a training run,
none of them inside a step: batches come from memory already on the device (the input pipeline is
measured on its own), no validation, no checkpoint files, no progress display.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from bench_train import Batches
from gpu_suite.measure import Measured, MemoryWatch, StepTimer, SyncCounter, count_flops, kept_losses

#: steps after the timed ones over which host syncs are counted: one whole `trainer.log_every_n_steps` period
SYNC_STEPS = 10


@dataclass(frozen=True)
class Layer:
    """The class layer of a row: the config option and its number of classes."""

    option: str  # model=default (full class layer) or model=partial_fc
    classes: int
    rate: float | None = None  # partial_fc's sample rate

    @property
    def label(self) -> str:
        kind = "full" if self.rate is None else f"pfc {self.rate:g}"
        return f"{kind} {self.classes:,}"


def overrides(backbone: str, batch: int, layer: Layer, device: str, precision: str, head: str,
              compile_backend: str | None = None) -> list[str]:
    """The train.py overrides of one row. `compile_backend` names torch.compile's backend (inductor where
    trainer=gpu compiles); on a CPU the rows run eagerly unless it is named (dynamo's `aot_eager` and `eager`
    trace and count the compiled calls without generating code: the tests use them)."""
    out = [
        f"backbone={backbone}",
        f"model={layer.option}",
        f"head={head}",
        f"data.batch_size={batch}",
        "trainer=gpu" if device == "cuda" else "trainer=cpu",
        f"trainer.precision={precision}",
        "logger=csv",
        "callbacks=none",
        "+trainer.enable_checkpointing=false",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "trainer.limit_val_batches=0",
        "trainer.max_epochs=1",
        "trainer.max_steps=-1",
        "extras.print_config=false",
    ]
    if device == "cpu" and compile_backend is None:  # inductor's C++ build would take minutes on a CPU
        out.append("model.compile=false")
    elif device == "cpu":
        out.append("model.compile=true")
    if compile_backend is not None:
        out.append(f"model.compile_backend={compile_backend}")
    if layer.rate is not None:
        out.append(f"model.centers.sample_rate={layer.rate}")
    return out


def compose(args_overrides: list[str], out_dir: Path):
    from elasticface.cli.compose import compose_train

    return compose_train(args_overrides, out_dir)


def recorder(timers: list[StepTimer], syncs: SyncCounter, sync_from: int, last: int, on_timed_start=None):
    """Callback: the step clocks (the timed steps, a profile window), each step's loss kept on the device, host
    syncs counted over the steps `sync_from..last` (not the epoch's end, where the divergence guard and the loggers
    read once per epoch); `on_timed_start()` just before the first timed step (a switch: the garbage collector)."""
    import pytorch_lightning as pl

    class _Recorder(pl.Callback):
        losses: list[torch.Tensor] = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == timers[0].warmup and on_timed_start is not None:
                on_timed_start()
            for timer in timers:
                timer.before(batch_idx)
            if batch_idx == sync_from:
                syncs.start()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.losses.append(loss.detach())
            for timer in timers:
                timer.after(batch_idx)
            if batch_idx == last:
                syncs.stop()

        def on_train_end(self, trainer, pl_module):
            syncs.stop()  # a run that stopped early

    rec = _Recorder()
    rec.losses = []
    return rec


#: the garbage-collector switches (switches.py): what each does when the timed steps start
GC_MODES = ("freeze", "disable")


def gc_switch(mode: str | None):
    """`freeze`: everything alive (compilation's objects among it) moved out of every later collection; `disable`:
    no collection at all; None: as Python runs (the default)."""
    import gc

    if mode is None:
        return None
    if mode not in GC_MODES:
        raise ValueError(f"gc={mode!r}: expected one of {', '.join(GC_MODES)}")

    def apply() -> None:
        gc.collect()
        gc.freeze() if mode == "freeze" else gc.disable()

    return apply


def run(cfg, classes: int, batches: list, warmup: int, steps: int, device: str,
        profiler=None, profile_steps: int = 0, gc_mode: str | None = None) -> tuple[Measured, object]:
    """Fit `warmup + steps (+ SYNC_STEPS on a GPU) + profile_steps` steps of the configured run in one fit;
    (measured, the module). A `profiler` (profiling.WindowProfiler) records the last `profile_steps` steps, after
    the timed ones, with named ranges for the host's sources (host.py), so the profile is of the row's own process
    state; `gc_mode` switches the garbage collector for the timed steps and after."""
    import gc

    import pytorch_lightning as pl

    from elasticface.callbacks.compiled_steps import CompiledSteps
    from elasticface.training import build_module, build_trainer
    from gpu_suite import host

    batch = int(batches[0][0].shape[0])
    count = SYNC_STEPS if device == "cuda" else 0
    profile_steps = profile_steps if profiler is not None else 0
    total = warmup + steps + count + profile_steps
    memory = MemoryWatch(device)
    memory.start()
    pl.seed_everything(0, workers=False, verbose=False)
    module = build_module(cfg, classes)
    trainer, _ = build_trainer(cfg)
    timer, syncs = StepTimer(warmup, steps, device), SyncCounter(device)
    timers = [timer] + ([StepTimer(warmup + steps + count, profile_steps, device, profiler)] if profile_steps else [])
    rec = recorder(timers, syncs, warmup + steps, warmup + steps + count - 1, gc_switch(gc_mode))
    trainer.callbacks.append(rec)
    loader = torch.utils.data.DataLoader(Batches(batches, total), batch_size=None, shuffle=False)
    with contextlib.ExitStack() as stack:
        if profile_steps:
            trainer.profiler = host.lightning_ranges()
            stack.enter_context(host.annotate(module))
        stack.callback(gc.enable)
        stack.callback(gc.unfreeze)
        trainer.fit(module, train_dataloaders=loader)
    measured = Measured(batch, timer.seconds, peak_mib=memory.peak_mib(),
                        losses=kept_losses(rec.losses, warmup + steps - 1))
    if syncs.count is not None:
        measured.syncs_per_step = syncs.count / count
    module.compiled_steps = next(c for c in trainer.callbacks if isinstance(c, CompiledSteps))  # job.compiled_status
    del trainer
    return measured, module


def step_flops(module, batch, device: str, precision: str) -> float | None:
    """FLOPs of one forward + backward of the module's step (its embed and class layer, its autocast). The
    Trainer's teardown moved the module back to the CPU: it goes to the batch's device again."""
    images, labels = batch
    module.to(images.device).train()

    def step() -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled="bf16" in precision):
            loss = module.classifier(module.embed(images), labels).loss
        loss.backward()

    flops = count_flops(step)
    module.zero_grad(set_to_none=True)
    return flops
