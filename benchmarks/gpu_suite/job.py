"""One measurement of the GPU suite, in a process of its own: a figure must not depend on what ran before it.

torch keeps global state that one measurement can change for the next: dynamo's caches and skip lists (torch 2.11
skips a compiled frame for good once it was called under a TorchDispatchMode such as the FLOP counter's, so every
row after the first ran eagerly), cuDNN's autotuner, the caching allocator. process.py starts this module
for each row, speed run and profile:

    python -m gpu_suite.job JOB.json RESULT.json

JOB.json names one side of one row (`template` or `arcface_torch`), its backbone, batch, class layer, precision,
head, extra train.py overrides, warm-up and timed steps, and what else to measure after the timed steps (a
torch.profiler window, the FLOPs of one step: both after the timing, so neither can change it). RESULT.json holds
the figures, whether the backbone ran compiled (counted: calls into the compiled graph per training step), this
process's id, and an error line instead of figures when the row could not be measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path



def layer_of(job: dict):
    from gpu_suite.template import Layer

    return Layer(**job["layer"])


def what(job: dict) -> str:
    return f"{job['side']} {job['backbone']} batch {job['batch']} {layer_of(job).label}"


def compiled_status(module, device: str) -> dict:
    """What ran: the training steps that called the backbone's compiled graph and those that ran it eagerly."""
    from elasticface.utils.speed import backbone_family, should_compile

    counted = module.compiled_steps  # the run's CompiledSteps callback (template.run)
    family = backbone_family(module.hparams.backbone.get("name"))
    return {"setting": bool(should_compile(module.compile_setting, device == "cpu", family)),
            "applied": module.compiled_calls is not None, "steps_compiled": counted.compiled,
            "steps_eager": counted.eager,
            "ran_compiled": module.compiled_calls is not None and counted.ran_compiled}


def eager_fallback(status: dict) -> str | None:
    """Why a run meant to be compiled is not a figure, or None."""
    if not status["setting"] or status["ran_compiled"]:
        return None
    if not status["applied"]:
        return "compile was not applied (no toolchain)"
    return (f"{status['steps_eager']} of {status['steps_eager'] + status['steps_compiled']} training steps ran the "
            "backbone eagerly although it is compiled")


def two_pass_profile(job: dict, run, between=None):
    """The profile of `run(profiler)`'s steps, taken twice: the window, kernels, device busy share and the host's
    sources (host.py) without Python stacks, where the host waits from a second pass with them (unless the job says
    `stacks: false`). Recording stacks slows the host so much that a compiled step becomes host-bound under it (an
    H200, iresnet100 batch 256: 911 ms per step under the stacks profiler against 85 ms timed, "device busy 7%"), so
    the busy share of such a window says nothing of the step. `between()` runs after the first pass, before the
    second. Returns (the summary, what the first pass's `run` returned)."""
    from gpu_suite import profiling

    plain = profiling.WindowProfiler(job["device"], job["profile_steps"])
    returned = run(plain)
    summary = plain.summary()
    if between is not None:
        between()
    if job.get("stacks", True):
        stacked = profiling.WindowProfiler(job["device"], job["profile_steps"], stacks=True)
        run(stacked)
        summary.wait_sites = stacked.summary().wait_sites
    return summary, returned


def compile_caches() -> dict:
    """Whether this process compiled from nothing or found inductor's and AOTAutograd's caches on disk (a switch's
    row says which: the call's first process compiles from nothing)."""
    from torch._dynamo.utils import counters

    return {key: counters[group][key] for group, key in (("inductor", "fxgraph_cache_hit"),
                                                         ("inductor", "fxgraph_cache_miss"),
                                                         ("aot_autograd", "autograd_cache_hit"),
                                                         ("aot_autograd", "autograd_cache_miss"))}


def template_side(job: dict, batches: list, out: Path) -> dict:
    """The row's timed steps and, in the same fit after them, its profile window: the first fit of the process is
    the row (a second run in a process was 15 ms a step faster on an H200, issue 71). Then, where the job asks, the
    same row again in this process (`second_run`), the stacks pass, and last the FLOP count."""
    from gpu_suite import template

    layer = layer_of(job)
    cfg = template.compose(job["overrides"], out / "run")
    result: dict = {}

    def fit(prof=None, gc_mode=job.get("gc")):
        return template.run(cfg, layer.classes, batches, job["warmup"], job["steps"], job["device"], profiler=prof,
                            profile_steps=job.get("profile_steps", 0), gc_mode=gc_mode)

    def second_run() -> None:
        if job.get("second_run"):
            again, module_again = fit(gc_mode=None)
            result["second_run"] = {"measured": dataclasses.asdict(again),
                                    "compiled": compiled_status(module_again, job["device"])}

    if job.get("profile_steps"):
        summary, (measured, module) = two_pass_profile(job, fit, between=second_run)
    else:
        (measured, module), summary = fit(), None
        second_run()
    result.update({"measured": dataclasses.asdict(measured), "compiled": compiled_status(module, job["device"]),
                   "compile_caches": compile_caches()})
    fallback = eager_fallback(result["compiled"])
    if fallback:
        result["error"] = f"{what(job)}: not a figure: {fallback}"
        return result
    if summary is not None:
        result["profile"] = dataclasses.asdict(summary)
        result["profile"]["compiled"] = result["compiled"]  # the same fit: its training steps, counted
    if job.get("flops"):  # last: the FLOP counter's dispatch mode may change how torch runs this frame afterwards
        result["measured"]["flops_per_step"] = template.step_flops(module, batches[0], job["device"],
                                                                   job["precision"])
    return result


def arcface_side(job: dict, batches: list) -> dict:
    from gpu_suite import arcface

    at = arcface.load(job["arcface_torch"])
    layer = layer_of(job)
    args = (at, job["backbone"], layer.classes, layer.rate or 1.0, batches, job["warmup"])
    # its FLOPs are counted before its timed steps, on the plain eager backbone (nothing is compiled on this side)
    measured = arcface.run(*args, job["steps"], job["device"], flops=bool(job.get("flops")))
    result = {"measured": dataclasses.asdict(measured), "compiled": None}
    if job.get("profile_steps"):
        summary, _ = two_pass_profile(job, lambda prof: arcface.run(*args, job["profile_steps"], job["device"],
                                                                          flops=False, profiler=prof))
        result["profile"] = dataclasses.asdict(summary)
    return result


def measure(job: dict, out: Path) -> dict:
    """The job's figures, or an error line naming the row and why (the suite prints it and goes on)."""
    from bench_train import make_batches
    from gpu_suite.measure import failure

    from elasticface.utils.console import quiet_library_noise

    quiet_library_noise()
    quiet_lightning()
    try:
        batches = make_batches(job["batch"], 112, job["layer"]["classes"], job["device"])
        if job["side"] == "template":
            result = template_side(job, batches, out)
        else:
            result = arcface_side(job, batches)
    except Exception as exc:  # noqa: BLE001 - one line for the row; the suite measures the others
        result = {"error": failure(exc, what(job))}
    result["pid"] = os.getpid()
    return result


def quiet_lightning() -> None:
    """Lightning's per-fit chatter (accelerator lines, "no val_dataloader", logging interval) would bury the table."""
    import logging
    import warnings

    for name in ("pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module=r"pytorch_lightning\.")


def main(argv: list[str]) -> int:
    job_file, result_file = argv
    job = json.loads(Path(job_file).read_text())
    os.environ.setdefault("WANDB_MODE", "offline")
    result = measure(job, Path(job["out_dir"]))
    Path(result_file).write_text(json.dumps(result, default=str))
    import torch

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
