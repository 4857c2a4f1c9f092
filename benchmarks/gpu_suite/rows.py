"""The suite's rows: which measurements a call takes (the step rows of each side, the speed settings on and off),
each as a job for a process of its own (process.py), and the figures each row keeps."""

from __future__ import annotations

from pathlib import Path

from gpu_suite import process
from gpu_suite.printing import compiled_text, num, row_text, say, second_run_text, switch_text

SETTINGS = [
    ("channels_last", ["model.channels_last=true"], ["model.channels_last=false"]),
    ("cudnn.benchmark", ["trainer.benchmark=true"], ["trainer.benchmark=false"]),
    ("fused optimizer", ["optimizer.fused=true", "optimizer.foreach=null"],
     ["optimizer.fused=false", "optimizer.foreach=true"]),
    # on: host reads only on logging steps (every trainer.log_every_n_steps-th, the default 10); off: every step
    ("no host syncs", [], ["trainer.log_every_n_steps=1"]),
    ("model.compile", ["model.compile=true"], ["model.compile=false"]),
    # on: the base itself (compile and channels_last by `auto`); off: the plain eager NCHW step
    ("trainer=gpu defaults", [], ["model.channels_last=false", "model.compile=false"]),
    # the class layer (docs/class_layer.md): the dense [B, C] logits against the chunked step, and the chunked step
    # at a larger chunk (fewer launches); chunk_size 8192 was measured on a CPU
    ("dense class layer", ["model.classifier.path=dense"], ["model.classifier.path=chunked"]),
    ("chunk_size 32768", ["model.classifier.path=chunked", "model.classifier.chunk_size=32768"],
     ["model.classifier.path=chunked", "model.classifier.chunk_size=null"]),
]
#: settings left out on a CPU, and why
CUDA_ONLY = {"cudnn.benchmark": "cuDNN is a GPU library",
             "model.compile": "inductor's C++ build takes minutes on a CPU",
             "trainer=gpu defaults": "inductor's C++ build takes minutes on a CPU"}
#: what identifies a speed run (runs with equal values are measured once)
SETTING_KEYS = ["model.channels_last", "trainer.benchmark", "optimizer.fused", "optimizer.foreach",
                "trainer.log_every_n_steps", "model.compile", "model.classifier.path", "model.classifier.chunk_size"]
#: relative loss difference within which a setting keeps the step's result, by trainer.precision
LOSS_RTOL = {"bf16-mixed": 2.0**-7, "16-mixed": 2.0**-10}
LOSS_RTOL_FP32 = 1e-5


def run_key(cfg, device: str) -> tuple:
    """What identifies a speed run on `device`, `auto` resolved: runs doing the same are measured once."""
    from omegaconf import OmegaConf

    from elasticface.utils.speed import should_compile, should_use_channels_last

    values = {k: OmegaConf.select(cfg, k) for k in SETTING_KEYS}
    compiled = should_compile(values["model.compile"], device == "cpu")
    values["model.compile"] = compiled
    values["model.channels_last"] = should_use_channels_last(values["model.channels_last"], device == "cpu", compiled)
    return tuple(str(v) for v in values.values())


def class_layers(args) -> list:
    """The rows' class layers in --layers' order: the full one, and Partial FC unless --pfc-classes 0."""
    from gpu_suite.template import Layer

    made = {"full": Layer("default", args.full_classes),
            "pfc": Layer("partial_fc", args.pfc_classes, args.pfc_rate) if args.pfc_classes else None}
    return [made[name] for name in args.layers if made[name] is not None]


def template_job(args, backbone: str, batch: int, layer, extra: list[str] = (), steps: int | None = None,
                 flops: bool = False, profile: bool = False) -> dict:
    from gpu_suite import template

    overrides = template.overrides(backbone, batch, layer, args.device, args.precision, args.head,
                                         args.compile_backend) + list(extra)
    return {"side": "template", "backbone": backbone, "batch": batch, "layer": vars(layer), "device": args.device,
            "precision": args.precision, "overrides": overrides, "warmup": args.warmup,
            "steps": args.steps if steps is None else steps, "flops": flops,
            "profile_steps": args.profile_steps if profile else 0, "stacks": args.stacks,
            "second_run": bool(profile and args.second_run)}


def arcface_job(args, backbone: str, batch: int, layer, flops: bool, profile: bool) -> dict:
    return {"side": "arcface_torch", "arcface_torch": args.arcface_torch, "backbone": backbone, "batch": batch,
            "layer": vars(layer), "device": args.device, "warmup": args.warmup, "steps": args.steps, "flops": flops,
            "profile_steps": args.profile_steps if profile else 0}


def measured_of(result: dict, lines: list[str]):
    """The Measured of a job's result, or None with its error line printed and kept."""
    from gpu_suite.measure import Measured

    for key in ("error", "profile_error"):
        if result.get(key):
            lines.append(result[key])
            say(result[key])
    if result.get("error"):
        return None
    return Measured(**result["measured"])


def step_rows(args, at, template_problem: str | None, peak: float | None, out: Path, lines: list[str]
              ) -> tuple[list[dict], list[dict]]:
    """The rows (each side of each in its own process) and the profiles taken after the rows at the speed size.
    Without the steps part, only the speed size's rows run, for their profiles."""
    from gpu_suite.arcface import NETWORKS
    from gpu_suite.job import what

    layers = class_layers(args)
    steps_part, profile_part = "steps" in args.parts, "profile" in args.parts
    say()
    if steps_part:
        say(f"{'backbone':<11}{'batch':>6}  {'class layer':<16}| {'template img/s':>14} {'compiled':>9} {'MFU':>7} "
            f"{'GFLOP/img':>9} {'peak MiB':>9} {'syncs':>5} | {'arcface_torch img/s':>19} {'MFU':>7} {'GFLOP/img':>9} "
            f"{'peak MiB':>9} {'syncs':>5} | {'img/s ratio':>11} {'mem ratio':>9}")
    else:
        say(f"profiles only: {args.speed_backbone} batch {args.speed_batch}, each side in its own process")
    rows, profiles = [], []
    sizes = [(b, n) for b in args.backbones for n in args.batches] if steps_part else \
        [(args.speed_backbone, args.speed_batch)]
    for backbone, batch in sizes:
        for layer in layers:
            profiled = profile_part and (backbone, batch) == (args.speed_backbone, args.speed_batch)
            results = {}
            timed = None if steps_part else 1  # profiles only: one timed step before the profiled ones
            if template_problem is None:
                results["template"] = process.in_own_process(
                    template_job(args, backbone, batch, layer, steps=timed, flops=steps_part, profile=profiled), out)
            if at is not None:
                job = {**arcface_job(args, backbone, batch, layer, flops=steps_part, profile=profiled),
                       "steps": timed or args.steps}
                if backbone not in NETWORKS:
                    results["arcface_torch"] = {"error": f"{what(job)}: backbone {backbone} has no arcface_torch "
                                                         f"counterpart (it has {', '.join(NETWORKS)})"}
                else:
                    results["arcface_torch"] = process.in_own_process(job, out)
            ours = measured_of(results["template"], lines) if "template" in results else None
            theirs = measured_of(results["arcface_torch"], lines) if "arcface_torch" in results else None
            if theirs is not None and theirs.note and theirs.note not in lines:
                lines.append(theirs.note)
                say(f"arcface_torch: {theirs.note}")
            for side, result in results.items():
                if result.get("profile"):
                    profiles.append({"side": side, "row": f"{backbone} batch {batch} {layer.label}",
                                     "pid": result["pid"], **result["profile"]})
            if steps_part:
                status = results.get("template", {}).get("compiled")
                rows.append(row_dict(backbone, batch, layer, ours, theirs, peak, status,
                                     {side: r.get("pid") for side, r in results.items()}))
                say(row_text(rows[-1], ours, theirs, peak))
                second = results.get("template", {}).get("second_run")
                if second and ours is not None:
                    rows[-1]["template_second_run"] = second
                    say(second_run_text(ours, second))
    return rows, profiles


def row_dict(backbone, batch, layer, ours, theirs, peak, compiled: dict | None = None, pids: dict | None = None
             ) -> dict:
    from gpu_suite.measure import mfu_text

    def side(m):
        if m is None:
            return None
        return {"images_per_s": m.images_per_s, "seconds_per_step": m.seconds_per_step, "peak_mib": m.peak_mib,
                "flops_per_step": m.flops_per_step, "mfu": mfu_text(m, peak), "losses": m.losses,
                "syncs_per_step": m.syncs_per_step}

    ratio = ours.images_per_s / theirs.images_per_s if ours and theirs else None
    mem = ours.peak_mib / theirs.peak_mib if ours and theirs and ours.peak_mib and theirs.peak_mib else None
    return {"backbone": backbone, "batch": batch, "class_layer": layer.label, "classes": layer.classes,
            "template": side(ours), "template_compiled": compiled, "arcface_torch": side(theirs), "ratio": ratio,
            "memory_ratio": mem, "pids": pids or {}}


def speed_layers(args) -> list:
    """The class layers the speed settings run at (--speed-layers), from the rows' own."""
    return [layer for layer in class_layers(args) if ("pfc" if layer.rate else "full") in args.speed_layers]


def speed_rows(args, layer, template_problem: str | None, out: Path, lines: list[str]) -> list[dict]:
    """Each speed setting on and off at one size and class layer, each run in its own process; runs with the same
    settings are measured once."""
    from gpu_suite.measure import Measured
    from gpu_suite import template

    say()
    say(f"speed settings: {args.speed_backbone} batch {args.speed_batch} {layer.label}, trainer="
        f"{'gpu' if args.device == 'cuda' else 'cpu'} defaults otherwise; keeps result: losses at steps 0 and 1 within "
        f"{LOSS_RTOL.get(args.precision, LOSS_RTOL_FP32):.2g} relative ({args.precision})")
    if template_problem is not None:
        say(f"  {template_problem}")
        return []
    cache: dict[tuple, tuple[Measured, str] | str] = {}  # the run's figures and what ran compiled, or its error

    def measure(extra: list[str]):
        job = template_job(args, args.speed_backbone, args.speed_batch, layer, extra)
        key = run_key(template.compose(job["overrides"], out / "speed_key"), args.device)
        if key not in cache:
            result = process.in_own_process(job, out)
            if result.get("error"):
                cache[key] = f"speed {layer.label} {' '.join(extra) or 'defaults'}: {result['error']}"
                lines.append(cache[key])
                say(f"  {cache[key]}")
            else:
                cache[key] = Measured(**result["measured"]), compiled_text(result["compiled"], counts=False)
        return cache[key]

    rtol = LOSS_RTOL.get(args.precision, LOSS_RTOL_FP32)
    say(f"  {'setting':<25}{'off img/s':>11}{'on img/s':>11}{'on/off':>8}{'compiled off/on':>17}{'syncs off/on':>14}   "
        f"{'loss steps 0, 1 off':<24}{'loss steps 0, 1 on':<24}{'last off/on':<18}{'max rel diff':>12}  keeps result")
    rows = []
    for name, on, off in (setting for setting in SETTINGS if setting[0] in args.settings):
        if name in CUDA_ONLY and args.device != "cuda":
            say(f"  {name:<25}measured on the GPU only ({CUDA_ONLY[name]})")
            continue
        off_run, on_run = measure(off), measure(on)
        if isinstance(off_run, str) or isinstance(on_run, str):
            continue
        (a, a_compiled), (b, b_compiled) = off_run, on_run
        rel = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(b.losses[:2], a.losses[:2]))
        row = {"setting": name, "class_layer": layer.label, "off": a.images_per_s, "on": b.images_per_s,
               "ratio": b.images_per_s / a.images_per_s, "compiled_off": a_compiled, "compiled_on": b_compiled,
               "syncs_off": a.syncs_per_step, "syncs_on": b.syncs_per_step, "losses_off": a.losses,
               "losses_on": b.losses, "max_rel_diff": rel, "keeps_result": rel <= rtol}
        rows.append(row)
        say(f"  {name:<25}{a.images_per_s:>11,.1f}{b.images_per_s:>11,.1f}{row['ratio']:>8.3f}"
            f"{a_compiled + '/' + b_compiled:>17}"
            f"{num(a.syncs_per_step, '.1f'):>7}/{num(b.syncs_per_step, '.1f'):<6}   "
            f"{', '.join(f'{x:.6f}' for x in a.losses[:2]):<24}{', '.join(f'{x:.6f}' for x in b.losses[:2]):<24}"
            f"{a.losses[-1]:.4f}/{b.losses[-1]:<10.4f}{rel:>12.2e}  {'yes' if row['keeps_result'] else 'NO'}")
    return rows


def switch_rows(args, template_problem: str | None, out: Path, lines: list[str]) -> list[dict]:
    """Each switch (switches.py) at the speed size with the full class layer, each in its own process, the first
    run of each process counted, against the `baseline` switch; a switch that would start after `--seconds` of
    this part is left out with one line (a process's time: the longest so far)."""
    import time

    from gpu_suite import switches

    (layer,) = [layer for layer in class_layers(args) if layer.rate is None] or [None]
    say()
    say(f"switches: {args.speed_backbone} batch {args.speed_batch} {layer.label if layer else '-'}, each in a process "
        "of its own, its first run counted; against `baseline` (ms per step and images/s: first run of the process)")
    if template_problem is not None or layer is None:
        say(f"  {template_problem or 'switches need the full class layer (--layers full)'}")
        return []
    say(f"  {'switch':<22}{'img/s':>10}{'ms/step':>9}{'vs baseline':>12}{'compiled':>10}{'same':>7}  "
        f"{'fx cache hit/miss':>17}{'process s':>10}  what (same: losses of steps 0, 1 as the baseline's)")
    started, longest, rows = time.perf_counter(), 0.0, []
    for name in args.switches:
        switch = switches.by_name(name)
        left = args.seconds - (time.perf_counter() - started) if args.seconds else None
        if left is not None and rows and left < longest:
            lines.append(f"switch {name}: left out ({left:.0f} s of --seconds {args.seconds} left, a process took "
                         f"{longest:.0f} s)")
            say(f"  {lines[-1]}")
            continue
        job = switches.job_of(switch, template_job(args, args.speed_backbone, args.speed_batch, layer,
                                                   profile=switch.profile))
        result = process.in_own_process(job, out)
        longest = max(longest, result.get("process_seconds", 0.0))
        if result.get("error"):
            lines.append(f"switch {name}: {result['error']}")
            say(f"  {lines[-1]}")
            continue
        row = {"switch": name, "why": switch.why, "measured": result["measured"], "compiled": result["compiled"],
               "compile_caches": result.get("compile_caches"), "process_seconds": result.get("process_seconds"),
               "second_run": result.get("second_run"), "profile": result.get("profile"), "pid": result.get("pid"),
               "warmup": job["warmup"]}
        rows.append(row)
        say(switch_text(against(row, rows, args.precision)))
    for row in rows:  # the baseline may have run after a switch
        against(row, rows, args.precision)
    return rows


def against(row: dict, rows: list[dict], precision: str) -> dict:
    """`row` with its step time over the baseline's and whether its losses at steps 0 and 1 are the baseline's within
    the precision's rounding (a switch must not change the step), where the baseline was measured."""
    base = next((r for r in rows if r["switch"] == "baseline"), None)
    row["vs_baseline"] = row["keeps_result"] = None
    if base is not None:
        row["vs_baseline"] = row["measured"]["seconds_per_step"] / base["measured"]["seconds_per_step"]
        # step 1 follows the lr schedule, which a longer run (more warm-up steps) stretches: step 0 only then
        kept = 2 if row["warmup"] == base["warmup"] else 1
        pairs = list(zip(row["measured"]["losses"][:kept], base["measured"]["losses"][:kept]))
        rel = max((abs(x - y) / max(abs(y), 1e-12) for x, y in pairs), default=None)
        row["keeps_result"] = None if rel is None else rel <= LOSS_RTOL.get(precision, LOSS_RTOL_FP32)
    return row
