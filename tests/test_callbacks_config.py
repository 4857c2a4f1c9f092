"""Callbacks come from the config; what a run cannot do without is there under every callbacks option."""

from __future__ import annotations

import pytest
from pytorch_lightning.callbacks import LearningRateMonitor, ProgressBar

from elasticface.callbacks.divergence import DivergenceGuard
from elasticface.callbacks.throughput import Throughput
from elasticface.checkpointing.best_checkpoint import BestCheckpoint
from elasticface.checkpointing.images_seen import ImagesSeen
from elasticface.checkpointing.loader_resume import ResumeLoaderState
from elasticface.checkpointing.run_checkpoint import RunCheckpoint
from elasticface.training import required_callbacks
from elasticface.utils.instantiators import instantiate_callbacks, instantiate_loggers

REQUIRED = (DivergenceGuard, ResumeLoaderState, ImagesSeen, Throughput, ProgressBar)


def kinds(callbacks):
    return {kind for kind in (*REQUIRED, RunCheckpoint, BestCheckpoint, LearningRateMonitor)
            if any(type(c) is kind or (kind is ProgressBar and isinstance(c, kind)) for c in callbacks)}


def test_the_default_option_lists_every_required_callback(tiny_cfg):
    cfg = tiny_cfg("callbacks=default", "trainer.enable_progress_bar=true")
    configured = instantiate_callbacks(cfg.callbacks, has_logger=True)
    assert set(REQUIRED) <= kinds(configured)
    assert required_callbacks(cfg, configured) == []


def test_callbacks_none_keeps_what_the_run_cannot_do_without(tiny_cfg):
    cfg = tiny_cfg("callbacks=none", "trainer.enable_progress_bar=true", "train.skip_nonfinite_steps=2")
    configured = instantiate_callbacks(cfg.callbacks, has_logger=True)
    assert configured == []
    added = required_callbacks(cfg, configured)
    assert kinds(added) == set(REQUIRED)  # and no checkpoints, LR monitor or plots
    assert next(c for c in added if isinstance(c, DivergenceGuard)).skip_budget == 2


def test_no_progress_display_when_the_trainer_has_none(tiny_cfg):
    cfg = tiny_cfg("callbacks=none", "trainer.enable_progress_bar=false")
    assert ProgressBar not in kinds(required_callbacks(cfg, []))


def test_learning_rate_monitor_is_left_out_without_a_logger(tiny_cfg):
    cfg = tiny_cfg("callbacks=default")
    assert LearningRateMonitor in kinds(instantiate_callbacks(cfg.callbacks, has_logger=True))
    assert LearningRateMonitor not in kinds(instantiate_callbacks(cfg.callbacks, has_logger=False))


@pytest.mark.parametrize("group, instantiate", [("callbacks", lambda c: instantiate_callbacks(c, True)),
                                                 ("logger", instantiate_loggers)])
def test_a_node_without_target_is_named(tiny_cfg, group, instantiate):
    cfg = tiny_cfg(f"+{group}.oops.refresh_rate=1")
    with pytest.raises(ValueError, match=rf"{group}.oops=.*_target_"):
        instantiate(cfg[group])


def test_hooks_are_not_wrapped_in_a_profiler_unless_one_is_configured(tiny_cfg):
    """With `trainer.profiler: null` the Trainer gets NoProfiler, whose `profile` hands back one empty context for
    every hook; a configured profiler is Lightning's own and still records the hooks."""
    from pytorch_lightning.profilers import SimpleProfiler

    from elasticface.training import build_trainer
    from elasticface.utils.no_profiler import NoProfiler

    trainer, _ = build_trainer(tiny_cfg())
    assert type(trainer.profiler) is NoProfiler
    assert trainer.profiler.profile("a") is trainer.profiler.profile("b")
    with trainer.profiler.profile("[Callback]Throughput.on_train_batch_end"):
        pass
    profiled, _ = build_trainer(tiny_cfg("trainer.profiler=simple"))
    assert type(profiled.profiler) is SimpleProfiler
    with profiled.profiler.profile("on_train_batch_end"):
        pass
    assert "on_train_batch_end" in profiled.profiler.recorded_durations
