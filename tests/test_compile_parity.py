"""Compiled training computes eager training's steps: from the same seed, the per-step losses, gradients and
BatchNorm running statistics agree within float rounding, the batches and learning rates are identical, dropout
draws the same masks, and validation runs the backbone in eval mode.

Both runs are `training.run` of the same composed config (what `python train.py` runs), traced step by step
by StepTrace: the toy backbone at 16x16 with dropout on (so dropout masks are compared too). Only the first
steps are compared: training amplifies a rounding difference about 10x per step (an eager run whose weights
moved by one float32 rounding leaves eager's losses by 3e-3 at step 3 and by 40% at step 10: docs/compile.md),
so after ~8 steps eager and compiled are as far apart as two eager runs of different rounding, and no
per-step tolerance can tell them apart from a real difference any more.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import elasticface.training as training
from elasticface.callbacks.step_trace import StepTrace
from elasticface.utils import speed

pytestmark = pytest.mark.skipif(bool(speed.missing_compile_toolchain("cpu")), reason="no C++ compiler here")

# Tolerances. float32 rounds at 2^-24 ~ 6e-8 relative; the compiled kernels fuse and reorder the sums of the
# convolutions, BatchNorm statistics and the flatten->Linear, and measured here the first 8 steps differ by at
# most 1.1e-6 relative (loss, gradient norm) and 4.4e-7 (running statistics). 1e-5 leaves 10x room, while every
# real change in the step is far above it: another dropout mask changes the first loss by ~1e-2, a BatchNorm
# update skipped or with another momentum changes the running statistics by ~1e-1, a different batch or
# learning rate fails the exact comparisons.
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-5
BN_RTOL = 1e-5


def traced_run(tiny_cfg, steps: int, compile_setting: str, *extra: str) -> dict:
    epochs = steps // 3  # debug=tiny: 8 identities x 6 images, batch 16: 3 steps an epoch
    trace = StepTrace()
    cfg = tiny_cfg("backbone=toy", "data.image_size=16", "model.backbone.dropout=0.2", "optimizer.lr=0.005",
                   f"trainer.max_epochs={epochs}", f"trainer.check_val_every_n_epoch={epochs}",
                   "checkpoint.every_n_steps=100000", "pixel_baseline=false", f"model.compile={compile_setting}",
                   "trainer.log_every_n_steps=100", *extra)
    build = training.required_callbacks
    training.required_callbacks = lambda *a, **k: build(*a, **k) + [trace]
    try:
        summary = training.run(cfg)
    finally:
        training.required_callbacks = build
    out = trace.as_tensors()
    out["summary"] = summary
    return out


def relative(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() == 2:
        return (a - b).norm(dim=1) / a.norm(dim=1)
    return (a - b).abs() / a.abs()


def assert_same_training(eager: dict, compiled: dict, steps: int) -> None:
    assert len(eager["loss"]) == len(compiled["loss"]) == steps
    assert torch.equal(eager["labels"], compiled["labels"]) and torch.equal(eager["images_sum"],
                                                                              compiled["images_sum"]), "same batches"
    assert torch.equal(eager["lr"], compiled["lr"]), "same learning-rate schedule"
    for key, rtol in (("loss", LOSS_RTOL), ("grad_norm", GRAD_RTOL), ("bn_stats", BN_RTOL)):
        diff = relative(eager[key], compiled[key])
        worst = int(diff.argmax())
        assert float(diff.max()) <= rtol, f"{key} differs by {float(diff.max()):.2e} at step {worst + 1}"
    assert compiled["val_compiled"].all() and not compiled["val_training"].any(), "validated in eval mode"
    assert not eager["val_compiled"].any()
    assert int(compiled["graphs_compiled"]) <= 3, "train and eval graphs (and a dynamic-shape one), no more"


@pytest.fixture
def quiet_threads():
    torch.set_num_threads(1)  # one thread: the same kernels' reduction order in both runs


@pytest.mark.slow  # compiling the backbone's train and eval graphs takes minutes on a busy 2-core CPU
def test_compiled_steps_equal_eager_steps(tiny_cfg, quiet_threads):
    steps = 6
    eager = traced_run(tiny_cfg, steps, "false")
    compiled = traced_run(tiny_cfg, steps, "true")
    assert_same_training(eager, compiled, steps)
    acc = [r["summary"]["val/acc_mean"]["final"] for r in (eager, compiled)]
    assert acc[0] == acc[1], "the same validation pairs decided the same way"


def test_compiled_dropout_draws_eagers_masks():
    """speed.compile_in_place: inductor's own random kernels would draw other masks (and move the global
    generator differently); with fallback_random the compiled module matches eager exactly."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4))
    compiled = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4))
    compiled.load_state_dict(eager.state_dict())
    speed.compile_in_place(compiled)
    x = torch.randn(8, 16)
    outputs = []
    for model in (eager, compiled):
        torch.manual_seed(1)
        outputs.append((model(x), torch.rand(3)))
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])
    assert not any("_orig_mod" in k for k in compiled.state_dict())
