"""`trainer.precision=16-mixed` end to end on the CPU: float16 autocast and a GradScaler, as a V100/T4 runs it,
with the class layer in fp32, every weight finite, and the scaler's skipped steps counted and logged."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate
from pytorch_lightning.plugins.precision import MixedPrecision

from elasticface.callbacks.divergence import nonfinite_weights
from elasticface.callbacks.grad_scaler import GradScalerMonitor
from elasticface.training import build_module, build_trainer
from elasticface.utils.precision import cpu_fp16_plugin


def test_16_mixed_trains_with_fp16_autocast_and_a_scaler_on_the_cpu(tiny_cfg, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # accelerator=auto picks the CPU, as here
    cfg = tiny_cfg("trainer.precision=16-mixed", "backbone=toy", "data.image_size=16")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    torch.manual_seed(0)
    model = build_module(cfg, datamodule.num_classes)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer, _ = build_trainer(cfg)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision) and (plugin.precision, plugin.device) == ("16-mixed", "cpu")
    assert isinstance(plugin.scaler, torch.amp.GradScaler)
    seen: dict[str, list] = {"embedding": [], "loss": []}
    model.backbone.register_forward_hook(
        lambda m, i, out: seen["embedding"].append(out.dtype) if m.training else None)
    model.classifier.register_forward_hook(lambda m, i, out: seen["loss"].append(out.loss.detach()))
    trainer.fit(model, datamodule=datamodule)

    assert set(seen["embedding"]) == {torch.float16}, "the backbone did not run under float16 autocast"
    losses = torch.stack(seen["loss"])
    assert losses.dtype == torch.float32 and torch.isfinite(losses).all(), "the class layer left fp32 or overflowed"
    assert nonfinite_weights(model) == []
    monitor = next(c for c in trainer.callbacks if isinstance(c, GradScalerMonitor))
    # the scale starts at torch's default and halves once per skipped step (no growth within 2,000 steps)
    halvings = math.log2(torch.amp.GradScaler("cpu").get_scale() / plugin.scaler.get_scale())
    assert monitor.total() == halvings
    assert 1 <= monitor.skipped < trainer.global_step, "expected the routine skips at the start, then real steps"
    assert float(trainer.logged_metrics["train/amp_skipped_steps"]) == monitor.skipped
    assert any(not torch.equal(p, start[n]) for n, p in model.named_parameters()), "no step moved the weights"
    assert math.isfinite(float(trainer.callback_metrics["val/acc_mean"]))


@pytest.mark.parametrize("precision, accelerator, cuda, expected", [
    ("16-mixed", "cpu", True, True), ("16-mixed", "auto", False, True), ("16", "cpu", False, True),
    ("16-mixed", "auto", True, False), ("16-mixed", "gpu", True, False), ("bf16-mixed", "cpu", False, False),
    ("32-true", "cpu", False, False)])
def test_the_fp16_plugin_is_given_only_for_cpu_runs_asking_for_16_mixed(precision, accelerator, cuda, expected,
                                                                         monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert (cpu_fp16_plugin(precision, accelerator) is not None) == expected
