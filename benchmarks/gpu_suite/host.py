"""The host's share of a profiled step, by source: which code the host was running when it launched each piece of
work, and how long the device sat idle before it (issue 71: an H200's compiled iresnet100 step ran no kernel for
22 of its 85 ms, and Python stacks in the window slowed the step tenfold, so they cannot say where).

Named ranges instead of stacks (`torch.profiler.record_function`, a few microseconds each, open only while the
profile window is): the module's parts (`annotate`: the embedding, the class layer, its chunk loop, the head) and
Lightning's own hooks and callbacks (`LightningRanges`, a Lightning profiler that opens a range for each action it
is told of); torch names the optimizer's step and zero_grad and the backward's autograd nodes itself. `attribute`
walks each launch (GPU: a kernel, copy or memset, through the host event that launched it; CPU: a leaf op, which
does the work itself) up its host ranges to the innermost that names a source, and sums per source: launches and
device time per step, the device's idle time before them (host-bound gaps), and the host's own time in the source
(its ranges' wall time less the named ranges inside them).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType

#: the range names `annotate` opens (a prefix keeps them apart from torch's and Lightning's)
PREFIX = "ef:"
#: whether the ranges are open: only inside a profile window (WindowProfiler sets it), so a timed step runs none
ACTIVE = [False]

#: (substring of a host event's name, source), the first that matches the innermost event wins
RULES = (
    (PREFIX + "chunk loop", "class layer: chunk loop"),
    (PREFIX + "head", "class layer: head"),
    (PREFIX + "class layer", "class layer: targets and loss"),
    (PREFIX + "embed", "backbone + neck"),
    ("_NonTargetLSEBackward", "class layer: chunk loop (backward)"),
    ("CompiledFunctionBackward", "backbone + neck (backward)"),
    ("Optimizer.step", "optimizer step"),
    ("Optimizer.zero_grad", "optimizer zero_grad"),
    ("autograd::engine::evaluate_function", "backward (other autograd nodes)"),
    ("[Callback]", "Lightning callbacks"),
    ("[LightningModule]", "Lightning module hooks"),
    ("[Strategy]", "Lightning strategy"),
    ("[_TrainingEpochLoop]", "Lightning loop"),
    ("run_training_batch", "Lightning loop"),
    ("optimizer_step", "Lightning loop"),
    ("training_batch_to_device", "Lightning loop"),
)
OUTSIDE = "outside every named range"
#: leaf ops that launch no work: views, metadata and allocation
NO_WORK = {"aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::t", "aten::transpose", "aten::expand",
           "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::alias",
           "aten::detach", "aten::lift_fresh", "aten::empty", "aten::empty_strided", "aten::resolve_conj",
           "aten::resolve_neg", "aten::_reshape_alias", "aten::view_as", "aten::narrow", "aten::unbind"}


def source_of(name: str) -> str | None:
    return next((source for key, source in RULES if key in name), None)


def _range(name: str):
    return torch.profiler.record_function(name) if ACTIVE[0] else contextlib.nullcontext()


def _wrapped(fn, name: str):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with _range(name):
            return fn(*args, **kwargs)

    return run


@contextlib.contextmanager
def annotate(module):
    """Named ranges around the module's parts while ACTIVE: `embed` (backbone and neck), the class layer's forward,
    its chunk loop (the chunked path's passes over class chunks) and the head's plan or logits. The instance's
    methods and the class layer's module functions are wrapped, and restored on exit."""
    import elasticface.classifier.classifier as layer

    patched = [(module, "embed"), (module.classifier, "forward"), (module.classifier.head, "plan"),
               (module.classifier.head, "forward")]
    functions = ("chunked_logits", "nontarget_lse", "margin_softmax_loss")
    names = {"embed": "embed", "forward": "class layer", "plan": "head"}
    saved_functions = {name: getattr(layer, name) for name in functions}
    for obj, attr in patched:
        label = "head" if obj is module.classifier.head else names[attr]
        setattr(obj, attr, _wrapped(getattr(obj, attr), PREFIX + label))
    for name, fn in saved_functions.items():
        setattr(layer, name, _wrapped(fn, PREFIX + ("class layer" if name == "margin_softmax_loss" else "chunk loop")))
    try:
        yield
    finally:
        for obj, attr in patched:
            vars(obj).pop(attr, None)
        for name, fn in saved_functions.items():
            setattr(layer, name, fn)


def lightning_ranges():
    """A Lightning profiler whose actions (`[Callback]ThroughputMonitor.on_train_batch_end`, `[Strategy]...
    .training_step`, `run_training_batch`, ...) are named ranges while ACTIVE (nothing recorded to a file)."""
    from pytorch_lightning.profilers import Profiler

    class LightningRanges(Profiler):
        def __init__(self) -> None:
            super().__init__()
            self._open: dict[str, list] = {}

        def start(self, action_name: str) -> None:
            if ACTIVE[0]:
                self._open.setdefault(action_name, []).append(
                    torch.ops.profiler._record_function_enter_new(action_name, None))

        def stop(self, action_name: str) -> None:
            stack = self._open.get(action_name)
            if stack:
                torch.ops.profiler._record_function_exit._RecordFunction(stack.pop())

        def summary(self) -> str:
            return ""

    return LightningRanges()


@dataclass
class _Host:
    """A host event as the attribution needs it."""

    name: str
    thread: int
    start: float
    end: float


def _sources_by_event(events) -> dict[int, str]:
    """Each host event's source: its own rule, else its nearest ancestor's (cpu_parent chain)."""
    memo: dict[int, str] = {}

    def find(e) -> str:
        key = id(e)
        if key not in memo:
            own = source_of(e.name)
            memo[key] = own or (find(e.cpu_parent) if e.cpu_parent is not None else OUTSIDE)
        return memo[key]

    return {id(e): find(e) for e in events}


def _own_host_ms(events, sources: dict[int, str]) -> dict[str, float]:
    """Per source, the wall time of its outermost events on each thread, less the events of other sources nested in
    them: the host's time in that code."""
    named = sorted((e for e in events if source_of(e.name)), key=lambda e: (e.thread, e.time_range.start,
                                                                            -e.time_range.end))
    own: dict[str, float] = {}
    stack: list = []
    for e in named:
        while stack and (stack[-1].thread != e.thread or stack[-1].time_range.end <= e.time_range.start):
            stack.pop()
        src, parent = source_of(e.name), stack[-1] if stack else None
        length = (e.time_range.end - e.time_range.start) / 1e3
        if parent is None or source_of(parent.name) != src:
            own[src] = own.get(src, 0.0) + length
            if parent is not None:
                own[source_of(parent.name)] -= length
        stack.append(e)
    return own


def cpu_work(host) -> list:
    """The ops that do the work on a CPU, one per call as a launch is on a GPU: the outermost ATen ops (as Python
    code or an autograd node calls them; `aten::conv2d` once, the `aten::mkldnn_convolution` inside it not again),
    views, metadata and allocations apart."""
    def aten(e) -> bool:
        return e is not None and e.name.startswith("aten::")

    return [e for e in host if aten(e) and e.name not in NO_WORK and not aten(e.cpu_parent)]


def attribute(events, steps: int, on_device: bool) -> list[dict]:
    """Per source, per step: launches, device ms, the device's idle ms before its launches (GPU), the host's own ms.
    `events`: torch.profiler's events of the window (`prof.events()`)."""
    events = list(events)
    host = [e for e in events if e.device_type == DeviceType.CPU]
    sources = _sources_by_event(host)
    by_id = {e.id: e for e in host if not getattr(e, "is_async", False)}
    rows: dict[str, dict] = {}

    def row(src: str) -> dict:
        return rows.setdefault(src, {"source": src, "launches": 0, "device_ms": 0.0, "idle_before_ms": 0.0,
                                     "host_ms": 0.0})

    if on_device:
        work = sorted((e for e in events if e.device_type == DeviceType.CUDA and e.name != "[memory]"
                       and not getattr(e, "is_user_annotation", False)), key=lambda e: e.time_range.start)
        end = None
        for e in work:
            launcher = by_id.get(getattr(e, "linked_correlation_id", 0))
            r = row(sources.get(id(launcher), OUTSIDE) if launcher is not None else OUTSIDE)
            r["launches"] += 1
            r["device_ms"] += (e.time_range.end - e.time_range.start) / 1e3
            if end is not None and e.time_range.start > end:
                r["idle_before_ms"] += (e.time_range.start - end) / 1e3
            end = e.time_range.end if end is None else max(end, e.time_range.end)
    else:
        for e in cpu_work(host):
            r = row(sources[id(e)])
            r["launches"] += 1
            r["device_ms"] += e.cpu_time_total / 1e3
    for src, ms in _own_host_ms(host, sources).items():
        row(src)["host_ms"] += ms
    out = []
    for r in sorted(rows.values(), key=lambda r: -(r["idle_before_ms"] + r["host_ms"])):
        out.append({k: (v / steps if isinstance(v, (int, float)) and k != "source" else v) for k, v in r.items()})
    return out


def sources_text(sources: list[dict], on_device: bool) -> list[str]:
    """The lines the suite prints under a profile: one per source."""
    work = "kernels" if on_device else "ATen calls"
    lines = [f"    host by source, per step: {work}, {'kernel' if on_device else 'op CPU'} ms"
             + (", device idle before them ms" if on_device else "") + ", host's own ms"]
    for s in sources:
        idle = f"{s['idle_before_ms']:9.2f}" if on_device else ""
        lines.append(f"      {s['source']:<38}{s['launches']:8.1f}{s['device_ms']:9.2f}{idle}{s['host_ms']:9.2f}")
    return lines
