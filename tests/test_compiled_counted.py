"""summary.json's `compiled` is counted: every training step called the backbone's compiled graph, through
validation, the baselines, checkpoints, a resume and later epochs; a step that ran eagerly (dynamo skipped the
frame: torch 2.11 does so for good after a call under a TorchDispatchMode) makes it false and says so once.

dynamo's `aot_eager` backend traces and calls graphs exactly as inductor's do, without generating code, so the
counting is tested in seconds on a CPU (`model.compile_backend`); the GPU suite reads the same counter.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import pytorch_lightning as pl
import torch

import elasticface.training as training
from conftest import ROOT
from elasticface.backbones.weights import backbone_state_dict
from elasticface.utils.speed import CompiledCalls, compile_in_place

COUNTED = ["model.compile=true", "model.compile_backend=eager", "trainer.check_val_every_n_epoch=1"]
STEPS_PER_EPOCH = 3  # debug=tiny: 8 identities x 6 images, batch 16


@pytest.fixture
def released_weights(tiny_cfg, tmp_path):
    """A backbone state_dict in the released layout (what `weights=` loads): the start-weights baseline embeds
    with it before the first step."""
    model = training.build_module(tiny_cfg(), num_classes=8)
    path = tmp_path / "backbone.pth"
    torch.save(backbone_state_dict(model.backbone), path)
    return str(path)


def test_a_run_stays_compiled_through_baselines_validation_and_checkpoints_until_a_step_runs_eagerly(
        tiny_cfg, released_weights, caplog):
    """Two epochs compiled, each validated and checkpointed, after the start-weights, raw-pixel and eigenface
    baselines; from the third on the compiled module runs eagerly, as torch.compile's `force_eager` stance makes it
    (the setting still says compiled): the count sees it and says so once."""

    class EagerFromEpoch2(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 2:
                torch.compiler.set_stance("force_eager")

    build = training.required_callbacks
    training.required_callbacks = lambda *a, **k: build(*a, **k) + [EagerFromEpoch2()]
    try:
        with caplog.at_level(logging.WARNING, logger="elasticface.module"):
            summary = training.run(tiny_cfg(*COUNTED, "trainer.max_epochs=3", f"weights={released_weights}",
                                            "eigenface_baseline=true", "pixel_baseline=true"))
    finally:
        training.required_callbacks = build
        torch.compiler.set_stance("default")
    assert None not in (summary["baseline/start_acc"], summary["baseline/pixel_acc"], summary["last_checkpoint"])
    assert summary["compile"] is True and summary["compiled"] is False
    assert summary["compiled_steps"] == {"compiled": 2 * STEPS_PER_EPOCH, "eager": STEPS_PER_EPOCH}
    said = [r.getMessage() for r in caplog.records if "EAGERLY" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"model.compile: training step {2 * STEPS_PER_EPOCH} ran the "
                                                 "backbone EAGERLY although it is compiled"), said


@pytest.mark.slow  # two runs compiled with aot_eager (inductor's tracing, no code generated): a minute or more
def test_a_resumed_run_is_compiled_again(tiny_cfg, released_weights):
    counted = [*COUNTED, "model.compile_backend=aot_eager", f"weights={released_weights}"]
    first = training.run(tiny_cfg(*counted))
    assert first["global_step"] == 2 * STEPS_PER_EPOCH
    assert first["compiled_steps"] == {"compiled": 2 * STEPS_PER_EPOCH, "eager": 0} and first["compiled"] is True
    resumed = training.run(tiny_cfg(*counted, "trainer.max_epochs=3", f"ckpt_path={first['last_checkpoint']}"))
    assert resumed["global_step"] == 3 * STEPS_PER_EPOCH
    assert resumed["compiled_steps"] == {"compiled": STEPS_PER_EPOCH, "eager": 0}  # this process's steps
    assert resumed["compiled"] is True


def test_the_counter_counts_graph_calls_not_module_calls():
    """A call under FlopCounterMode (a TorchDispatchMode) runs the module without its graph on every torch; the
    count says so, and the calls after it are counted again where dynamo does not skip the frame for good."""
    from torch.utils.flop_counter import FlopCounterMode

    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    counter = compile_in_place(module, "aot_eager")
    assert isinstance(counter, CompiledCalls) and counter.calls == 0
    x = torch.randn(2, 4)
    module(x)
    assert (counter.graphs, counter.calls) == (1, 1)
    with FlopCounterMode(display=False) as flops:
        module(x)
    assert counter.calls == 1 and flops.get_total_flops() > 0
    torch.compiler.set_stance("force_eager")
    try:
        module(x)
    finally:
        torch.compiler.set_stance("default")
    assert counter.calls == 1


def test_an_unknown_compile_backend_is_one_line(tiny_cfg):
    with pytest.raises(Exception, match=r"model.compile_backend='inductr': expected inductor \(the default\) or "
                                         "another backend dynamo registers"):
        training.build_module(tiny_cfg("model.compile_backend=inductr"), num_classes=8)


def test_every_module_compiled_in_one_process_runs_compiled():
    """dynamo counts compilations per code object: without its caches emptied, the 9th module of one class
    compiled in a process (a multirun's 5th job, in Hydra's basic launcher) ran eagerly. An earlier module,
    called again after later ones were compiled, runs compiled too."""
    x = torch.randn(2, 4)
    modules, counters = [], []
    for _ in range(12):
        module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        counters.append(compile_in_place(module, "eager"))
        module(x)
        modules.append(module)
    assert [c.calls for c in counters] == [1] * 12
    modules[0](x)
    assert counters[0].calls == 2


@pytest.mark.slow  # six training jobs in one process: about a minute on 2 cores
def test_every_job_of_a_multirun_trains_compiled(tmp_path):
    """As typed: a sweep of six heads in Hydra's basic launcher (one process); the 5th job trained eagerly."""
    heads = ["arcface", "cosface", "elastic_arc", "elastic_arc_plus", "elastic_cos", "softmax"]
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "debug=tiny", "backbone=toy",
                          "data.image_size=16", f"head={','.join(heads)}", "model.compile=true",
                          "model.compile_backend=eager", "logger=[]"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "logs").rglob("summary.json")]
    assert sorted(s["head"] for s in summaries) == heads
    assert all(s["compiled"] is True and s["compiled_steps"]["eager"] == 0 for s in summaries), \
        [(s["head"], s["compiled_steps"]) for s in summaries]
    assert "EAGERLY" not in out.stdout + out.stderr
