"""The speed settings run on this CPU exactly as on a GPU: bf16 autocast, torch.compile, channels_last, fused SGD.

Each is exercised through the same code the GPU path runs (the module, the Trainer, the divergence guard);
bad input (no compiler, no bf16 on the CPU) gets a message naming the setting.
"""

from __future__ import annotations

import inspect
import logging

import pytest
from hydra.errors import InstantiationException
import pytorch_lightning as pl
import torch

import elasticface.training as training
from elasticface.callbacks.divergence import zero_momentum
from elasticface.module import FaceRecognitionModule
from elasticface.training import build_module
from elasticface.utils import speed
from conftest import compose_train

needs_bf16 = pytest.mark.skipif(not speed.cpu_has_bf16(), reason="this CPU has no bf16 instructions")


class DtypeProbe(pl.Callback):
    """Records the dtypes the backbone, the centres and the head produce in training steps."""

    def __init__(self) -> None:
        self.seen: dict[str, set] = {"backbone": set(), "cos": set(), "logits": set(), "loss": set(), "weights": set()}

    def on_fit_start(self, trainer, pl_module) -> None:
        pl_module.backbone.register_forward_hook(
            lambda m, i, o: self.seen["backbone"].add(o.dtype) if m.training else None
        )
        pl_module.centers.register_forward_hook(
            lambda m, i, o: self.seen["cos"].add(o[0].dtype) if m.training else None
        )
        plan = pl_module.head.plan  # the head's one training call, on the dense and the chunked path

        def probed(*args, **kwargs):
            out = plan(*args, **kwargs)
            self.seen["logits"].add(out.target.dtype)
            return out

        pl_module.head.plan = probed

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen["loss"].add((outputs["loss"].dtype, bool(torch.isfinite(outputs["loss"]))))
        self.seen["weights"] |= {p.dtype for p in pl_module.centers.parameters()}


@needs_bf16
def test_bf16_autocast_step_keeps_heads_and_centres_fp32(tiny_cfg, monkeypatch):
    probe = DtypeProbe()
    build = training.required_callbacks
    monkeypatch.setattr(training, "required_callbacks", lambda *a, **k: build(*a, **k) + [probe])
    summary = training.run(
        tiny_cfg(
            "trainer.precision=bf16-mixed", "model.channels_last=true", "trainer.max_epochs=1", "pixel_baseline=false"
        )
    )
    assert probe.seen["backbone"] == {torch.bfloat16}, "autocast is on: the backbone computes in bf16"
    assert probe.seen["cos"] == {torch.float32} and probe.seen["logits"] == {torch.float32}
    assert probe.seen["weights"] == {torch.float32}
    assert probe.seen["loss"] == {(torch.float32, True)}, "finite fp32 losses"
    assert summary["weights_finite"]


def test_bf16_on_a_cpu_without_bf16_is_refused_naming_the_setting(tiny_cfg, monkeypatch):
    monkeypatch.setattr(speed, "cpu_has_bf16", lambda: False)
    with pytest.raises(ValueError, match=r"trainer.precision=bf16-mixed: this CPU has no bf16 instructions"):
        training.build_trainer(tiny_cfg("trainer.precision=bf16-mixed"))


def test_channels_last_gives_the_same_embeddings(tiny_cfg):
    torch.manual_seed(0)
    plain = build_module(tiny_cfg(), num_classes=8).eval()
    nhwc = build_module(tiny_cfg("model.channels_last=true"), num_classes=8).eval()
    nhwc.load_state_dict(plain.state_dict())
    conv = next(m for m in nhwc.backbone.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.rand(4, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(nhwc(x), plain(x), rtol=1e-4, atol=1e-4)


def set_up_for_fit_on_cpu(module):
    """What the Trainer does before the first step: attach itself, then `setup("fit")`."""
    module.trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False)
    module.setup("fit")
    return module


def test_compile_and_channels_last_default_to_auto_and_debug_runs_stay_eager(tiny_cfg):
    """`auto` by default: compiled where training runs on a GPU (measured there: docs/speed.md) or a CPU (compiled
    and eager training ended level over 5 seeds on real faces: docs/compile.md), NHWC on a GPU when eager; `true`
    everywhere. Debug modes, the toy example, the sweep demo, the y1 fine-tune and the LFW benchmark's eager rows
    stay eager; the module alone is eager and NCHW unless told."""
    params = inspect.signature(FaceRecognitionModule).parameters
    assert params["compile"].default is False and params["channels_last"].default is False
    for overrides in ([], ["trainer=gpu"], ["trainer=ddp"], ["experiment=ms1mv2_r100"]):
        cfg = compose_train(overrides)
        assert cfg.model.compile == "auto" and cfg.model.channels_last == "auto", overrides
    for overrides in (["debug=tiny"], ["debug=fdr"], ["debug=overfit"], ["experiment=sweep_demo"],
                      ["experiment=toy_2d"], ["experiment=lfw_fold10"], ["hparams_search=lfw_fold10"],
                      ["experiment=lfw_y1_finetune"]):
        assert compose_train(overrides).model.compile is False, overrides
    assert compose_train(["hparams_search=lfw_fold10", "lfw_row=elastic_arc_compiled"]).model.compile == "cpu"
    assert compose_train(["model.compile=false"]).model.compile is False
    assert speed.should_compile(True, training_on_cpu=False) and not speed.should_compile(False, training_on_cpu=True)
    assert speed.should_compile("auto", training_on_cpu=False)
    assert not speed.should_compile("cpu", training_on_cpu=False)


def fake_gpu_trainer():
    """A Trainer stand-in whose accelerator is not the CPU: what `setup` reads to decide on a GPU."""
    from types import SimpleNamespace

    return SimpleNamespace(accelerator=object(), datamodule=None)


def is_nhwc(module) -> bool:
    conv = next(m for m in module.backbone.modules() if isinstance(m, torch.nn.Conv2d))
    return conv.weight.is_contiguous(memory_format=torch.channels_last) and module.channels_last


@pytest.mark.parametrize(("channels_last", "compile", "on_gpu", "nhwc"), [
    ("auto", "false", True, True),    # eager on a GPU: NHWC (2.05x on an H200)
    ("auto", "auto", True, False),    # compiled on a GPU: inductor picks the layout (NCHW measured faster)
    ("auto", "false", False, False),  # a CPU: NCHW
    ("true", "false", False, True),   # true: everywhere
    ("false", "false", True, False),  # false: nowhere
])
def test_channels_last_auto_is_nhwc_on_a_gpu_when_eager(tiny_cfg, monkeypatch, channels_last, compile, on_gpu, nhwc):
    import elasticface.module

    monkeypatch.setattr(elasticface.module, "compile_available", lambda backbone: True)
    monkeypatch.setattr(elasticface.module, "compile_in_place",
                        lambda backbone, backend, *mode: speed.CompiledCalls(backend))
    module = build_module(tiny_cfg(f"model.channels_last={channels_last}", f"model.compile={compile}"), 8)
    if on_gpu:
        module.trainer = fake_gpu_trainer()
        module.setup("fit")
    else:
        set_up_for_fit_on_cpu(module)
    assert is_nhwc(module) == nhwc
    assert (module.compiled_calls is not None) == (compile == "auto" and on_gpu)


def test_channels_last_auto_gives_the_same_embeddings_on_a_gpu_setup(tiny_cfg):
    torch.manual_seed(0)
    plain = build_module(tiny_cfg("model.channels_last=false"), num_classes=8).eval()
    auto = build_module(tiny_cfg("model.channels_last=auto"), num_classes=8).eval()
    auto.load_state_dict(plain.state_dict())
    auto.trainer = fake_gpu_trainer()
    auto.setup("validate")
    assert is_nhwc(auto)
    x = torch.rand(4, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(auto(x), plain(x), rtol=1e-4, atol=1e-4)


def test_channels_last_setting_outside_true_false_auto_is_refused(tiny_cfg):
    with pytest.raises(InstantiationException, match=r"model.channels_last='gpu': expected true, false or auto"):
        build_module(tiny_cfg("model.channels_last=gpu"), num_classes=8)


@pytest.mark.parametrize("setting", ["auto", "cpu"])
@pytest.mark.parametrize("level", ["AVX512", "AVX2", "DEFAULT"])
def test_compile_auto_and_cpu_are_eager_under_avx2_kernels(monkeypatch, caplog, level, setting):
    """`auto` and `cpu` compile on a CPU unless torch's kernels there are AVX2 (a compiled step diverged there at
    step 0, docs/compile.md): then it trains eagerly and says so; `true` compiles anyway."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: level)
    with caplog.at_level(logging.INFO, logger="elasticface.utils.speed"):
        assert speed.should_compile(setting, training_on_cpu=True) == (level != "AVX2")
    said = f"model.compile={setting}: training eagerly, torch's CPU kernels here are AVX2" in caplog.text
    assert said == (level == "AVX2")
    assert speed.should_compile(True, training_on_cpu=True)


def test_compile_cpu_reads_the_kernel_level_torch_runs(tmp_path):
    """ATEN_CPU_CAPABILITY=avx2 (on a CPU that has AVX2) is seen by the rule, in a fresh process."""
    import os
    import subprocess
    import sys

    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip(f"this CPU's torch kernels are {torch.backends.cpu.get_cpu_capability()}: no AVX2 to select")
    code = "from elasticface.utils.speed import should_compile; print(should_compile('cpu', True))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"})
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


@pytest.mark.slow  # inductor compiles its ISA probes afresh in each process: half a minute on 2 cores
def test_each_vector_isa_compiles_into_its_own_inductor_cache(tmp_path):
    """inductor's cache key leaves the vector ISA out: an AVX2 and an AVX-512 process sharing one
    TORCHINDUCTOR_CACHE_DIR get folders of their own under it, named for what inductor picks, and asking twice
    does not nest them."""
    import os
    import subprocess
    import sys

    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("needs AVX-512 kernels to compare with AVX2 ones")
    code = ("from elasticface.utils.speed import use_inductor_cache_of_this_isa as use\n"
            "from torch._inductor.cpu_vec_isa import pick_vec_isa\n"
            "print(use() == use(), use(), str(pick_vec_isa()))")
    folders = {}
    for level in ("avx2", "avx512"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "ATEN_CPU_CAPABILITY": level, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
        assert out.returncode == 0, out.stderr[-2000:]
        same, folder, isa = out.stdout.split(maxsplit=2)
        assert same == "True" and os.path.dirname(folder) == str(tmp_path), out.stdout
        assert os.path.basename(folder) == "isa-" + isa.strip().replace(" ", "-"), out.stdout
        folders[level] = folder
    assert folders["avx2"].endswith("isa-avx2") and folders["avx2"] != folders["avx512"]


def test_compile_setting_outside_true_false_auto_cpu_is_refused(tiny_cfg):
    with pytest.raises(InstantiationException, match=r"model.compile='gpu': expected true, false, auto .* or cpu"):
        build_module(tiny_cfg("model.compile=gpu"), num_classes=8)


def test_compile_without_a_toolchain_trains_eagerly_and_says_so(tiny_cfg, monkeypatch, caplog):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    assert "no C++ compiler" in speed.missing_compile_toolchain("cpu")
    # true: compile=cpu is already eager where torch's kernels are AVX2 (EAGER_CPU_LEVELS), before any toolchain
    module = build_module(tiny_cfg("model.compile=true"), num_classes=8)
    with caplog.at_level(logging.WARNING):
        set_up_for_fit_on_cpu(module)
    assert "model.compile" in caplog.text and "WITHOUT compile" in caplog.text
    assert module.compiled_calls is None and module.backbone._compiled_call_impl is None


@pytest.mark.parametrize("setting", ["true", "auto", "cpu"])
def test_compile_with_a_toolchain_compiles_the_backbone_in_place_when_fitting(tiny_cfg, setting):
    if speed.missing_compile_toolchain("cpu"):
        pytest.skip("no C++ compiler here")
    module = build_module(tiny_cfg(f"model.compile={setting}"), num_classes=8)
    assert module.backbone._compiled_call_impl is None, "built (or loaded for eval/export): eager"
    set_up_for_fit_on_cpu(module)
    if setting != "true" and torch.backends.cpu.get_cpu_capability() in speed.EAGER_CPU_LEVELS:
        assert module.compiled_calls is None and module.backbone._compiled_call_impl is None, "eager: AVX2 kernels"
        return
    assert module.compiled_calls is not None and module.backbone._compiled_call_impl is not None
    assert not any("_orig_mod" in k for k in module.state_dict()), "checkpoints keep the eager names"


@pytest.mark.slow
def test_compiled_bf16_channels_last_run_trains(tiny_cfg):
    if speed.missing_compile_toolchain("cpu") or not speed.cpu_has_bf16():
        pytest.skip("needs a C++ compiler and bf16")
    summary = training.run(
        tiny_cfg(
            "model.compile=true", "model.channels_last=true", "trainer.precision=bf16-mixed", "trainer.max_epochs=1"
        )
    )
    assert summary["weights_finite"] and summary["global_step"] > 0


@pytest.mark.parametrize("impl", [{"fused": True}, {"foreach": True}])
def test_fused_and_foreach_sgd_match_the_single_tensor_rule(impl):
    """torch's for-loop SGD is the oracle; the paper's momentum and weight decay."""
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(5, 3, generator=g), torch.randn(7, generator=g)]
    grads = [[torch.randn_like(p) for p in params] for _ in range(3)]
    out = []
    for kwargs in ({"foreach": False}, impl):
        ps = [torch.nn.Parameter(p.clone()) for p in params]
        opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=5e-4, **kwargs)
        for step in grads:
            for p, gr in zip(ps, step):
                p.grad = gr.clone()
            opt.step()
        out.append([p.detach() for p in ps])
    for a, b in zip(*out):
        torch.testing.assert_close(a, b)


def test_a_skipped_first_fused_step_leaves_momentum_at_zero():
    """torch allocates fused SGD's momentum uninitialised and a found_inf skip leaves it so: zero_momentum first."""
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=5e-4, fused=True)
    zero_momentum(opt)
    p.grad = torch.full((4,), float("nan"))
    opt.found_inf = torch.ones(())
    opt.step()
    torch.testing.assert_close(p.detach(), torch.ones(4))
    torch.testing.assert_close(opt.state[p]["momentum_buffer"], torch.zeros(4))
    opt.found_inf = torch.zeros(())
    p.grad = torch.full((4,), 2.0)
    opt.step()
    # SGD's first real step: buf = g + wd * p = 2.0005, p -= lr * buf
    torch.testing.assert_close(p.detach(), torch.full((4,), 1 - 0.1 * (2.0 + 5e-4)))
