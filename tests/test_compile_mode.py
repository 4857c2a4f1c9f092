"""`model.compile_mode`: torch.compile's modes for the backbone, `reduce-overhead` replaying its graphs as CUDA
graphs (issue 71: 22 ms of an H200's 85 ms iresnet100 step ran no kernel). On a CPU: the key, its checks, the one
line where CUDA graphs cannot run, and the wrapper that copies a replay's outputs and names a graph inductor could
not capture. On a GPU (`gpu`): the same steps as the default mode, validation and a resumed checkpoint."""

from __future__ import annotations

import logging

import pytest
import torch
from test_compile_parity import assert_same_training, traced_run
from torch import nn

import elasticface.training as training
from elasticface.utils import speed

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_compile_mode_is_a_config_key_overridden_without_plus(tiny_cfg):
    assert tiny_cfg().model.compile_mode == "default"
    module = training.build_module(tiny_cfg("model.compile_mode=reduce-overhead"), num_classes=8)
    assert module.compile_mode == "reduce-overhead"


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.compile_mode=fast"], r"model.compile_mode='fast': expected one of default, reduce-overhead, "),
    (["model.compile_mode=reduce-overhead", "model.compile_backend=eager"],
     r"model.compile_mode=reduce-overhead: the modes are inductor options; model.compile_backend=eager"),
])
def test_a_wrong_compile_mode_is_one_line(tiny_cfg, overrides, message):
    with pytest.raises(Exception, match=message):
        training.build_module(tiny_cfg(*overrides), num_classes=8)


def test_cuda_graphs_where_they_cannot_run_are_one_line_and_the_mode_s_other_options_stay(caplog):
    with caplog.at_level(logging.WARNING, logger="elasticface.utils.speed"):
        assert speed.mode_options("reduce-overhead", "cpu") == {}
        options = speed.mode_options("max-autotune", "cpu")
    assert options == {"max_autotune": True, "coordinate_descent_tuning": True}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"model.compile_mode={mode}: CUDA graphs need a CUDA device (training on cpu); compiling "
                     "without them (the step's kernels are launched one by one)" for mode in
                     ("reduce-overhead", "max-autotune")]
    assert speed.mode_options("default", "cuda") == {}


def test_a_torch_without_cuda_graphs_keeps_the_uncaptured_step(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="elasticface.utils.speed"):
        assert speed.mode_options("reduce-overhead", "cuda") == {}
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"model.compile_mode=reduce-overhead: torch {torch.__version__} has no CUDA graph support")


def test_replayed_graphs_return_copies_and_an_uncaptured_graph_is_named_once(caplog):
    """A replay overwrites its outputs in place: the wrapper hands out copies (the validation keeps the embeddings of
    an image and of its flip). A graph inductor skipped is counted and named once, with inductor's reason."""
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    counter = speed.CompiledCalls("eager", {speed.CUDAGRAPHS_OPTION: True})
    buffer = torch.arange(4.0)  # a graph's static output buffer

    def graph(x):
        if counter.calls == 2:  # the second call compiles a graph inductor cannot capture
            log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
        buffer.copy_(x)
        return [buffer]

    run = counter._replayed(graph)
    with caplog.at_level(logging.WARNING, logger="elasticface.utils.speed"):
        first = run(torch.ones(4))[0]
        second = run(torch.full((4,), 2.0))[0]
        run(torch.zeros(4))
    assert first.tolist() == [1.0] * 4 and second.tolist() == [2.0] * 4, "each call's own output"
    assert counter.calls == 3 and counter.cudagraph_skips == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "elasticface.utils.speed"]
    assert lines == ["model.compile_mode: inductor could not capture a graph of the backbone as a CUDA graph "
                     "(skipping cudagraphs due to mutated inputs (1 instances)); it runs uncaptured, its kernels "
                     "launched one by one"]


# -- on a GPU ------------------------------------------------------------------------------------------------------

GPU_RUN = ("trainer.accelerator=gpu", "trainer.devices=1")


@pytest.mark.gpu
@CUDA
@pytest.mark.skipif(bool(speed.missing_compile_toolchain("cuda")), reason="no Triton")
def test_cuda_graph_steps_equal_the_default_mode_s_and_validate(tiny_cfg):
    """The same kernels replayed: the per-step losses, gradients and BatchNorm statistics of the default mode, the
    same validation decisions (image and flip embedded by two replays), every step counted compiled and captured."""
    torch.manual_seed(0)
    steps = 6
    default = traced_run(tiny_cfg, steps, "true", *GPU_RUN)
    graphs = traced_run(tiny_cfg, steps, "true", *GPU_RUN, "model.compile_mode=reduce-overhead")
    assert_same_training(default, graphs, steps)
    assert graphs["summary"]["compiled"] is True
    acc = [r["summary"]["val/acc_mean"]["final"] for r in (default, graphs)]
    assert acc[0] == acc[1]


@pytest.mark.gpu
@CUDA
@pytest.mark.skipif(bool(speed.missing_compile_toolchain("cuda")), reason="no Triton")
def test_a_graph_inductor_cannot_capture_runs_uncaptured_with_one_line(caplog):
    """An input mutated inside the graph cannot be replayed: inductor runs it uncaptured, the counter names it, and
    the result is eager's."""

    class Mutates(nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    module, x = Mutates().cuda(), torch.ones(8, device="cuda")
    counter = speed.compile_in_place(module, "inductor", "reduce-overhead", "cuda")
    with caplog.at_level(logging.WARNING, logger="elasticface.utils.speed"):
        outs = [module(x.clone()) for _ in range(3)]
    assert all(torch.equal(o, torch.full_like(x, 4.0)) for o in outs)
    assert counter.calls == 3 and counter.cudagraph_skips >= 1
    assert any("could not capture a graph of the backbone" in r.getMessage() for r in caplog.records)


@pytest.mark.gpu
@CUDA
@pytest.mark.skipif(bool(speed.missing_compile_toolchain("cuda")), reason="no Triton")
def test_a_cuda_graph_run_checkpoints_and_resumes_as_the_default_mode(tiny_cfg):
    """The checkpoint of a CUDA-graph run holds the eager parameter names, and resuming it in that mode trains on,
    every step of the resumed process counted compiled."""
    base = ["model.compile=true", "model.compile_mode=reduce-overhead", *GPU_RUN]
    first = training.run(tiny_cfg(*base, "trainer.max_epochs=2"))
    state = torch.load(first["last_checkpoint"], map_location="cpu", weights_only=False)["state_dict"]
    assert state and not any("_orig_mod" in k for k in state)
    resumed = training.run(tiny_cfg(*base, "trainer.max_epochs=3", f"ckpt_path={first['last_checkpoint']}"))
    steps = resumed["global_step"] - first["global_step"]
    assert steps > 0 and resumed["compiled_steps"] == {"compiled": steps, "eager": 0}
