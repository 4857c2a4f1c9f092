"""`trainer.accumulate_grad_batches=k` on batches of B/k gives the update of one batch of B (small GPUs), with the
full, Partial FC and sharded class layers.

Exact only where no statistic is taken over the batch: BatchNorm normalises each micro-batch by its own mean
and variance, so the models here have their BatchNorm layers replaced by the identity (the comparison is then
exact up to float rounding); the ElasticFace+ heads sort margins within a batch, and Partial FC below
sample_rate 1 draws its negatives per micro-batch, so those equal the larger batch only in distribution.
"""

from __future__ import annotations

import copy

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from elasticface.training import build_module

NUM_CLASSES = 8
BATCH = 16
SIZE = 16
#: a small backbone at 16x16 pixels: the comparison, not the model, is under test
SMALL = ("backbone=toy", f"data.image_size={SIZE}")


def _without_batchnorm(module: nn.Module) -> nn.Module:
    for name, child in module.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            setattr(module, name, nn.Identity())
        else:
            _without_batchnorm(child)
    return module


def _fit(model: pl.LightningModule, data: TensorDataset, batch_size: int, accumulate: int, root) -> pl.LightningModule:
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=accumulate, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, limit_val_batches=0, default_root_dir=str(root))
    trainer.fit(model, DataLoader(data, batch_size=batch_size, shuffle=False, drop_last=True))
    assert trainer.global_step == len(data) // (batch_size * accumulate)
    return model


@pytest.mark.parametrize("model_option", ["default", "partial_fc", "model_parallel"])
def test_accumulated_micro_batches_give_the_large_batch_update(model_option, tiny_cfg, tmp_path):
    overrides = [*SMALL, "head=arcface", f"model={model_option}"]
    if model_option == "partial_fc":
        overrides.append("model.centers.sample_rate=1.0")  # every class sampled: deterministic, so exact
    cfg = tiny_cfg(*overrides)
    torch.manual_seed(0)
    start = _without_batchnorm(build_module(cfg, NUM_CLASSES))
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(2 * BATCH, 3, SIZE, SIZE, generator=generator) * 2 - 1
    labels = torch.randint(0, NUM_CLASSES, (2 * BATCH,), generator=generator)
    data = TensorDataset(images, labels)
    large = _fit(copy.deepcopy(start), data, BATCH, 1, tmp_path / "large")
    small = _fit(copy.deepcopy(start), data, BATCH // 4, 4, tmp_path / "small")
    moved = 0
    for (name, a), (_, b), (_, s) in zip(large.named_parameters(), small.named_parameters(), start.named_parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{model_option} {n}: {m}")
        moved += int(not torch.equal(a, s))
    assert moved >= 3, "the steps moved almost nothing: the comparison would be empty"
    if model_option == "default":  # the comparison can fail: the same micro-batches stepped one by one differ
        stepped = _fit(copy.deepcopy(start), TensorDataset(images[: BATCH * 2 // 4], labels[: BATCH * 2 // 4]),
                       BATCH // 4, 1, tmp_path / "stepped")
        once = _fit(copy.deepcopy(start), TensorDataset(images[: BATCH * 2 // 4], labels[: BATCH * 2 // 4]),
                    BATCH // 2, 1, tmp_path / "once")
        assert max(float((a - b).detach().abs().max()) for a, b in zip(once.parameters(), stepped.parameters())) > 1e-3


def test_partial_fc_below_rate_one_trains_with_accumulation(tiny_cfg, tmp_path):
    """Each micro-batch draws its own negatives (as each GPU does in insightface's Partial FC): it runs, finite."""
    torch.manual_seed(0)
    model = build_module(tiny_cfg(*SMALL, "model=partial_fc", "model.centers.sample_rate=0.5"), NUM_CLASSES)
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.rand(BATCH, 3, SIZE, SIZE, generator=generator) * 2 - 1,
                         torch.randint(0, NUM_CLASSES, (BATCH,), generator=generator))
    before = copy.deepcopy(model.centers.weight.detach())
    _fit(model, data, BATCH // 4, 4, tmp_path)
    after = model.centers.weight.detach()
    assert torch.isfinite(after).all() and not torch.equal(after, before)


def test_gradients_are_dropped_at_each_optimizer_step_and_kept_within_an_accumulation_window(tiny_cfg, tmp_path):
    """The module frees the gradients right after each optimizer step (Lightning alone clears them only after the
    next step's forward, keeping a whole set beside that forward's activations: the memory peak), and never
    between the micro-batches of one accumulated step."""
    torch.manual_seed(0)
    model = build_module(tiny_cfg(*SMALL, "head=arcface"), NUM_CLASSES)
    seen: list[bool] = []

    class GradsAtBatchStart(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(any(p.grad is not None for p in pl_module.parameters()))

    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.rand(BATCH, 3, SIZE, SIZE, generator=generator) * 2 - 1,
                         torch.randint(0, NUM_CLASSES, (BATCH,), generator=generator))
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0, callbacks=[GradsAtBatchStart()], default_root_dir=str(tmp_path))
    trainer.fit(model, DataLoader(data, batch_size=BATCH // 4, shuffle=False, drop_last=True))
    assert trainer.global_step == 2
    # micro-batches 0, 1 make step 1 and 2, 3 step 2: gradients exist only inside a step's window
    assert seen == [False, True, False, True]
    assert all(p.grad is None for p in model.parameters())
