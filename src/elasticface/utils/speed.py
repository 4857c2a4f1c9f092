"""The speed settings' preconditions: each is checked where it is set, never a silent slowdown.

- `model.compile=true` (and `cpu`, on a CPU) needs inductor's toolchain: a C++ compiler on CPU, Triton on a
  GPU. Without it torch.compile fails at the first step, minutes into a run; here it falls back to eager,
  saying so in one line. Off by default: compiled steps equal eager ones only to float rounding, and training
  amplifies rounding like a change of seed (docs/compile.md), so it is a default only once compared over seeds.
- `trainer.precision=bf16-mixed` on a CPU without bf16 instructions runs emulated bf16, slower than fp32:
  refused, naming the setting.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)


def missing_compile_toolchain(device_type: str) -> str | None:
    """What torch.compile's inductor backend lacks on `device_type` ('cpu' or 'cuda'), or None."""
    if device_type == "cuda":
        try:
            from torch.utils._triton import has_triton
        except ImportError:  # pragma: no cover - every supported torch has it
            return "Triton (torch.utils._triton) cannot be imported"
        return None if has_triton() else "Triton is not installed (pip install triton)"
    compilers = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    if any(c and shutil.which(c) for c in compilers):
        return None
    return "no C++ compiler found (looked for $CXX, g++, c++, clang++; install g++, e.g. apt-get install g++)"


def compile_available(module: nn.Module) -> bool:
    """Whether `model.compile=true` can compile `module` here; if not, warn and train eagerly."""
    device = next((p.device.type for p in module.parameters()), "cpu")
    device = "cuda" if torch.cuda.is_available() and device == "cpu" else device  # moved to the GPU later
    missing = missing_compile_toolchain(device)
    if missing is None:
        return True
    log.warning(
        "model.compile: torch.compile's inductor backend needs a toolchain on %s: %s. "
        "Training WITHOUT compile (eager, slower); set model.compile=false to silence this.",
        device,
        missing,
    )
    return False


#: inductor draws dropout's random numbers through torch's own generator (`fallback_random`): the same masks
#: as eager, and the global generator left where eager leaves it (inductor's own random kernels draw
#: different masks and consume the global generator differently)
COMPILE_OPTIONS = {"fallback_random": True}


#: `model.compile_mode`: torch.compile's modes, applied as the inductor options torch gives each
#: (torch._inductor.list_mode_options): `reduce-overhead` replays the compiled graphs as CUDA graphs (cudagraph trees),
#: one launch for the kernels between two host reads; the max-autotune modes benchmark kernel choices while compiling
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
CUDAGRAPHS_OPTION = "triton.cudagraphs"


def check_compile_mode(mode: object, backend: str = "inductor") -> str:
    """`model.compile_mode`: one of COMPILE_MODES; a mode other than `default` is an inductor option."""
    if mode not in COMPILE_MODES:
        raise BadValue(f"model.compile_mode={mode!r}: expected one of {', '.join(COMPILE_MODES)} (torch.compile's "
                         "modes; reduce-overhead = CUDA graphs)")
    if mode != "default" and backend != "inductor":
        raise BadValue(f"model.compile_mode={mode}: the modes are inductor options; model.compile_backend={backend} "
                         "generates no code (use model.compile_mode=default with it)")
    return str(mode)


def cudagraphs_problem(device_type: str) -> str | None:
    """Why CUDA graphs cannot replay a step trained on `device_type` with this torch, or None."""
    if device_type != "cuda":
        return f"CUDA graphs need a CUDA device (training on {device_type})"
    if not torch.cuda.is_available() or not hasattr(torch.cuda, "CUDAGraph"):
        return f"torch {torch.__version__} has no CUDA graph support here"
    return None


def mode_options(mode: str, device_type: str) -> dict:
    """The inductor options of `mode` that can run on `device_type`: without CUDA graphs where they cannot (one line
    says so; the step runs its compiled kernels uncaptured)."""
    from torch._inductor import list_mode_options

    options = dict(list_mode_options(mode))
    problem = cudagraphs_problem(device_type) if options.get(CUDAGRAPHS_OPTION) else None
    if problem:
        options.pop(CUDAGRAPHS_OPTION)
        log.warning("model.compile_mode=%s: %s; compiling without them (the step's kernels are launched one by one)",
                    mode, problem)
    return options


class _SkipReasons(logging.Handler):
    """inductor's reasons for running a graph without CUDA graphs ("skipping cudagraphs due to ..."), kept."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.reasons.append(record.getMessage().splitlines()[0][:200])


class CompiledCalls:
    """A torch.compile backend that counts the calls into the graphs it built: whether a step *ran* compiled,
    which the setting cannot say. dynamo can run a compiled module eagerly with no error (torch 2.11 skips its
    frame for good once it was called under a TorchDispatchMode such as FlopCounterMode; a recompile limit
    reached; `torch.compiler.set_stance`), and only a call into the graph shows that it did not.

    `backend` is torch.compile's backend by name: `inductor` (with COMPILE_OPTIONS and `options`, a mode's) or one of
    dynamo's debugging backends (`aot_eager`, `eager`), which trace and count the same way without generating code.

    With CUDA graphs (`options` holds triton.cudagraphs) each call starts a new cudagraph-tree step and returns copies
    of the graph's outputs: a replay overwrites the outputs of the one before, and the validation keeps the
    embeddings of an image and of its flip (a [B, 512] copy, one small kernel). A graph inductor could not capture
    (dynamic shapes, a host sync, a CPU tensor) runs uncaptured: `cudagraph_skips` counts them, and the first is
    said in one line naming its reason."""

    def __init__(self, backend: str = "inductor", options: dict | None = None) -> None:
        self.backend = backend
        self.options = dict(options or {})
        self.cudagraphs = bool(self.options.get(CUDAGRAPHS_OPTION))
        self.calls = 0
        self.graphs = 0
        self.cudagraph_skips = 0
        self._skips = _SkipReasons()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        if self.backend == "inductor":
            from torch._inductor.compile_fx import compile_fx

            compiled = compile_fx(gm, example_inputs, config_patches={**COMPILE_OPTIONS, **self.options})
        else:
            from torch._dynamo import lookup_backend

            compiled = lookup_backend(self.backend)(gm, example_inputs)
        self.graphs += 1
        if self.cudagraphs:
            return self._replayed(compiled)

        def run(*args: Any) -> Any:
            self.calls += 1
            return compiled(*args)

        return run

    def _replayed(self, compiled: Callable) -> Callable:
        from torch._dynamo.utils import counters
        from torch._inductor.cudagraph_utils import cudagraphs_log
        from torch.utils._pytree import tree_map_only

        cudagraphs_log.addHandler(self._skips)
        seen = counters["inductor"]["cudagraph_skips"]

        def run(*args: Any) -> Any:
            nonlocal seen
            self.calls += 1
            torch.compiler.cudagraph_mark_step_begin()
            out = tree_map_only(torch.Tensor, torch.clone, compiled(*args))
            skips = counters["inductor"]["cudagraph_skips"]
            if skips != seen:  # the backward graph is compiled at the first backward: checked at every call
                if not self.cudagraph_skips:
                    reason = self._skips.reasons[-1] if self._skips.reasons else "see TORCH_LOGS=cudagraphs"
                    log.warning("model.compile_mode: inductor could not capture a graph of the backbone as a CUDA "
                                "graph (%s); it runs uncaptured, its kernels launched one by one", reason)
                self.cudagraph_skips += skips - seen
                seen = skips
            return out

        return run


def check_compile_backend(name: object) -> str:
    """`model.compile_backend`: inductor, or a dynamo backend registered under that name."""
    from torch._dynamo import list_backends

    if name not in list_backends(exclude_tags=()):
        raise BadValue(f"model.compile_backend={name!r}: expected inductor (the default) or another backend "
                         "dynamo registers, such as aot_eager or eager (torch._dynamo.list_backends(exclude_tags=()))")
    return str(name)


def compile_in_place(module: nn.Module, backend: str = "inductor", mode: str = "default",
                     device_type: str = "cuda") -> CompiledCalls:
    """torch.compile `module` in place (its state_dict keeps its names, no `_orig_mod.`), with eager's random
    numbers, from an inductor cache of this CPU's vector ISA, in `mode` (`model.compile_mode`; CUDA graphs only
    where `device_type` runs them); the returned counter says what ran compiled.

    dynamo's in-memory caches are emptied first, as a new process would have them: they count compilations per
    code object, so every module of one class compiled in a process adds to the same count, and at dynamo's
    recompile limit (8) the next one runs eagerly with a warning. Hydra's basic launcher runs a multirun's jobs
    in one process: the 5th job of `train.py -m head=a,b,c,d,e model.compile=true` trained eagerly. A module
    compiled earlier in the process still runs compiled: dynamo traces it again at its next call (inductor's
    cache on disk stays)."""
    import torch._dynamo

    torch._dynamo.reset()
    use_inductor_cache_of_this_isa()
    counter = CompiledCalls(backend, mode_options(check_compile_mode(mode, backend), device_type))
    module.compile(backend=counter)
    return counter


def eagerly() -> Any:
    """A context in which a module compiled in place runs its eager code: the passes before the first step (the
    loaded weights' baseline, imprinting) give the numbers an uncompiled backbone gives, and compile no graph of
    their own (validation compiles the eval-mode graph when it needs it)."""
    return torch.compiler.set_stance("force_eager")


def use_inductor_cache_of_this_isa() -> str:
    """Point inductor at `<its cache folder>/isa-<vector ISA>` (TORCHINDUCTOR_CACHE_DIR, the user's or torch's
    default) and return it. inductor's graph cache key leaves the CPU vector ISA out: a process with AVX-512
    kernels given a graph an AVX2 process cached (or the reverse: `ATEN_CPU_CAPABILITY=avx2`, or one cache folder
    on a share that AVX2 and AVX-512 nodes use) compiles the other ISA's kernel code with its own vector width
    and overruns a stack buffer: a segfault at the first compiled step (docs/compile.md)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    folder = "isa-" + re.sub(r"\W+", "-", str(pick_vec_isa()))
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    if os.path.basename(os.path.normpath(base)) != folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, folder)
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def check_compile_setting(value: object) -> bool | str:
    """`model.compile`: true, false, `auto` (compile where it was measured to pay: training on a GPU, or on a CPU
    above AVX2) or `cpu` (only when training on a CPU)."""
    if isinstance(value, bool) or value in ("auto", "cpu"):
        return value
    raise BadValue(f"model.compile={value!r}: expected true, false, auto (compile when training on a GPU or "
                     "a CPU) or cpu (only on a CPU)")


def check_channels_last_setting(value: object, key: str = "model.channels_last") -> bool | str:
    """`model.channels_last` (eval's `channels_last`): true, false or `auto` (the layout measured fastest:
    CPU_AUTO, GPU_AUTO)."""
    if isinstance(value, bool) or value == "auto":
        return value
    raise BadValue(f"{key}={value!r}: expected true, false or auto (the layout measured fastest for "
                     "the backbone's family on this device)")


@dataclass(frozen=True)
class AutoLayout:
    """How `model.compile=auto` and `model.channels_last=auto` train a backbone family on one kind of device, and
    the measurement that chose it."""

    compile: bool
    channels_last: bool
    why: str


#: per backbone family on a CPU, measured by benchmarks/bench_layout.py (a training step at batch 64, each layout in
#: its own process, one thread, CPU time; 2-core AMD EPYC with AVX-512; docs/compile.md). Compiled where its steps
#: win the compilation back within a short run; NHWC where an eager step (AVX2 kernels, where `auto` stays eager:
#: EAGER_CPU_LEVELS) was measured faster in it. A family not named here: `default`.
CPU_AUTO = {
    "mobilefacenet": AutoLayout(True, True, "compiled steps 1.29-1.42x eager NHWC's, 1.50x NCHW's, compilation won "
                                            "back within about 90 steps; eager, NHWC 1.07-1.16x NCHW"),
    "default": AutoLayout(True, False, "IResNet: compiled steps 1.42x eager NCHW's, 1.10x NHWC's"),
}
#: on a GPU: compiled, and inductor picks the layout (iresnet100 on an H200: 2.28x eager's images/s; compiled NCHW
#: 3,084 images/s against 2,731-2,858 given NHWC; eager NHWC 2.05x eager NCHW, docs/speed.md)
GPU_AUTO = AutoLayout(True, False, "iresnet100 on an H200: compiled 2.28x eager's images/s, inductor's own layout")


def backbone_family(name: object) -> str:
    """`iresnet100` and `iresnet_tiny` -> iresnet, `mobilefacenet_y1` -> mobilefacenet, timm's `convnext_tiny` ->
    convnext: the letters the name starts with."""
    match = re.match(r"[a-z]+", str(name or "").lower())
    return match.group(0) if match else ""


def auto_layout(family: str, on_cpu: bool) -> AutoLayout:
    """What `auto` chooses for a backbone family on a CPU or a GPU."""
    return CPU_AUTO.get(family, CPU_AUTO["default"]) if on_cpu else GPU_AUTO


def should_use_channels_last(setting: bool | str, on_cpu: bool, compiled: bool, family: str = "") -> bool:
    """Whether the backbone runs NHWC: `true` always; `auto` when the backbone runs eagerly and NHWC was measured
    faster for its family on this kind of device (on a GPU always: iresnet100 on an H200 2.05x NCHW's images/s).
    Compiled, `auto` leaves the layout to inductor, which picks its own for the convolutions."""
    if setting is True:
        return True
    if setting != "auto" or compiled:
        return False
    return auto_layout(family, on_cpu).channels_last or not on_cpu


#: torch CPU kernel levels (torch.backends.cpu.get_cpu_capability()) where `auto` and `cpu` train eagerly: a compiled
#: template step diverged to NaN at step 0 under one thread and AVX2 kernels (an AVX2-only EPYC, the GPU suite's
#: CPU rows) and the cause could not be reproduced on an AVX-512 host emulating AVX2 (docs/compile.md), so the
#: default is not trusted there; `model.compile=true` still compiles
EAGER_CPU_LEVELS = ("AVX2",)


def should_compile(setting: bool | str, training_on_cpu: bool, family: str = "") -> bool:
    """Whether a run compiles its backbone: `true` always; `auto` on a GPU (iresnet100 on an H200: 2.28x the
    images/s, the same step to bf16 rounding, docs/speed.md) and, like `cpu`, on a CPU where compiling paid for
    the backbone's family (CPU_AUTO) unless torch's kernels there are at an EAGER_CPU_LEVELS level (then it says
    so in one line)."""
    if setting is True:
        return True
    if setting not in ("auto", "cpu"):
        return False
    if not training_on_cpu:
        return setting == "auto"
    if not auto_layout(family, True).compile:
        return False
    level = torch.backends.cpu.get_cpu_capability()
    if level in EAGER_CPU_LEVELS:
        log.info("model.compile=%s: training eagerly, torch's CPU kernels here are %s (compiled training is the "
                 "default only above it, docs/compile.md); model.compile=true compiles", setting, level)
        return False
    return True


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 / AMX, or AVX-512 core), as oneDNN sees it and as
    torch's own kernels run here: under ATEN_CPU_CAPABILITY=avx2 (an AVX2 machine emulated) oneDNN still finds
    AVX-512 while torch's kernels have none, a mix no CPU has (compiled bf16 training diverged at step 0 in it)."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if x86 and torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2"):
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def check_cpu_precision(precision: str, accelerator_is_cpu: bool) -> None:
    """Refuse bf16 on a CPU that would emulate it (a silent slowdown otherwise)."""
    if accelerator_is_cpu and "bf16" in str(precision) and not cpu_has_bf16():
        raise BadValue(
            f"trainer.precision={precision}: this CPU has no bf16 instructions (oneDNN reports none), "
            f"so bf16 would be emulated and slower than fp32; use trainer.precision=32-true on it"
        )


def check_world_size(num_nodes: int, devices: object) -> None:
    """A launcher (torchrun, SLURM) started WORLD_SIZE processes: trainer.num_nodes x trainer.devices must match."""
    world = os.environ.get("WORLD_SIZE")
    if world is None or not isinstance(devices, int) or devices < 1:
        return
    if int(num_nodes) * devices != int(world):
        raise BadValue(
            f"trainer.num_nodes={num_nodes} x trainer.devices={devices} = {int(num_nodes) * devices} processes, "
            f"but the "
            f"launcher started WORLD_SIZE={world} (torchrun --nnodes x --nproc-per-node, or SLURM's tasks): set "
            f"trainer.num_nodes to the number of nodes and trainer.devices to the processes per node"
        )
