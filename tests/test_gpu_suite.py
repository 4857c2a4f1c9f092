"""benchmarks/gpu_suite/run.sh, issue 39's one-call GPU measurement, runs on the CPU at tiny sizes so it cannot rot.

The command is docs/speed.md's own (`--device cpu`), read from the page; `--json` is added to read its figures.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_suite" / "run.sh"
CALL = ROOT / "benchmarks" / "gpu_suite" / "call.sh"
DOCS = ROOT / "docs" / "speed.md"
TINY = ["--device", "cpu", "--backbones", "tiny", "--batches", "8", "--full-classes", "16", "--warmup", "1"]


def suite(args: list[str], tmp_path) -> tuple[subprocess.CompletedProcess, dict]:
    """The suite as typed; its ~16 processes take minutes on 2 cores, more on a loaded machine."""
    out = tmp_path / "suite.json"
    env = {**os.environ, "PYTHON": sys.executable, "WANDB_MODE": "offline"}
    proc = subprocess.run(["bash", str(SCRIPT), *args, "--json", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def docs_cpu_command() -> list[str]:
    (line,) = [m for m in re.findall(r"^bash benchmarks/gpu_suite/run\.sh .*$", DOCS.read_text(), re.M)
               if "--device cpu" in m]
    return shlex.split(line)[2:]


@pytest.mark.slow  # every part, each of its ~16 measurements in a process of its own: minutes on 2 cores
def test_the_documented_cpu_run_prints_every_part(tmp_path):
    proc, result = suite(docs_cpu_command(), tmp_path)
    text = proc.stdout
    assert re.search(r"device CPU .*torch .*commit ", text.splitlines()[0]), text[:500]
    assert "arcface_torch: not given" in text
    rows = result["rows"]
    assert [(r["backbone"], r["class_layer"]) for r in rows] == [("tiny", "full 16"), ("tiny", "pfc 0.1 64")]
    for r in rows:
        assert r["template"]["images_per_s"] > 0 and r["template"]["flops_per_step"] > 0
        assert r["template"]["mfu"] == "unknown peak"  # a CPU has no bf16 peak in the table
        assert r["arcface_torch"] is None and r["ratio"] is None
        assert r["template_compiled"]["setting"] is False and r["template_compiled"]["applied"] is False
    assert {r["class_layer"] for r in result["speed"]} == {"full 16", "pfc 0.1 64"}  # --speed-layers full,pfc
    speed = {r["setting"]: r for r in result["speed"] if r["class_layer"] == "pfc 0.1 64"}
    assert set(speed) == {"channels_last", "fused optimizer", "no host syncs", "dense class layer", "chunk_size 32768"}
    for name in ("model.compile", "cudnn.benchmark", "trainer=gpu defaults"):
        assert re.search(rf"^  {re.escape(name)} +measured on the GPU only", text, re.M), name
    # independent of any tolerance: the optimizer acts after step 0's loss, so both sides' first losses are the same
    # bits; logging reads values and computes nothing, so every loss of the host-sync pair is the same bits
    assert speed["fused optimizer"]["losses_on"][0] == speed["fused optimizer"]["losses_off"][0]
    assert speed["no host syncs"]["losses_on"] == speed["no host syncs"]["losses_off"]
    assert all(r["on"] > 0 and r["off"] > 0 for r in speed.values())
    # the chunked class layer is the dense one to float rounding (tests/test_classifier.py holds it per head)
    assert speed["dense class layer"]["keeps_result"] and speed["chunk_size 32768"]["keeps_result"]
    pipe = result["pipeline"]
    assert pipe["cpu_images_per_s"] > 0 and pipe["gpu_images_per_s"] is None and pipe["gpu_note"] == "no GPU"
    assert pipe["model_images_per_s"] == max(r["template"]["images_per_s"] for r in rows)
    assert re.search(r"CPU, 1 loader workers: [\d,.]+ images/s = [\d.]+x the fastest template row", text)


def test_a_wrong_arcface_torch_path_is_one_line_and_the_template_rows_still_run(suite_in_process, tmp_path, capsys):
    wrong = tmp_path / "not_insightface"
    wrong.mkdir()
    result = suite_in_process.main([*TINY, "--pfc-classes", "0", "--steps", "1", "--parts", "steps",
                                    "--arcface-torch", str(wrong)])
    text = capsys.readouterr().out
    named = [line for line in text.splitlines() if str(wrong) in line]
    assert len(named) == 1 and named[0].startswith("arcface_torch rows skipped: --arcface-torch"), text
    assert "partial_fc_v2.py" in named[0]  # says what was expected there
    (row,) = result["rows"]
    assert row["template"]["images_per_s"] > 0 and row["arcface_torch"] is None
    assert result["lines"] == [named[0]]


@pytest.mark.skipif(not os.environ.get("ARCFACE_TORCH"),
                    reason="needs insightface's recognition/arcface_torch (deepinsight/insightface, fetched): "
                    "set ARCFACE_TORCH to its folder")
def test_arcface_torch_step_runs_beside_the_template_on_the_cpu(tmp_path):
    proc, result = suite(["--device", "cpu", "--arcface-torch", os.environ["ARCFACE_TORCH"], "--backbones",
                          "iresnet18", "--batches", "2", "--full-classes", "16", "--pfc-classes", "64", "--warmup",
                          "1", "--steps", "1", "--parts", "steps"], tmp_path)
    for r in result["rows"]:
        ours, theirs = r["template"], r["arcface_torch"]
        assert theirs["images_per_s"] > 0 and r["ratio"] == pytest.approx(ours["images_per_s"] / theirs["images_per_s"])
        # the same architecture (insightface's iresnet18) costs the same FLOPs whoever built it
        assert ours["flops_per_step"] == pytest.approx(theirs["flops_per_step"], rel=0.01)
    assert re.search(r"iresnet18 +2  full 16 .*\| +[\d.]+ +[\d.-]+$", proc.stdout, re.M), proc.stdout


@pytest.fixture
def suite_in_process(monkeypatch, tmp_path):
    """gpu_suite imported from benchmarks/ with each measurement taken in this process (job.measure, what
    the suite's own processes run), so a test can replace what a row runs; the Lightning log levels the
    measurements quiet are restored afterwards."""
    import logging

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    levels = {name: logging.getLogger(name).level for name in ("pytorch_lightning", "lightning_fabric")}
    from gpu_suite import cli, job, process

    def here(one, out):
        folder = out / f"job{len(list(out.iterdir()))}"
        folder.mkdir()
        return job.measure({**one, "out_dir": str(folder)}, folder)

    monkeypatch.setattr(process, "in_own_process", here)
    yield cli
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.slow  # four measuring processes, each importing torch and Lightning: about a minute on 2 cores
def test_rows_run_in_processes_of_their_own_and_count_what_ran_compiled_in_either_order(tmp_path):
    """Each side of each row is measured in a process of its own, so no row, profile or FLOP count before it (the
    FLOP counter's dispatch mode made torch 2.11 run every later row eagerly) can change it: in either order each
    row's backbone ran its compiled graph at every training step, counted (dynamo's `eager` backend traces and calls
    graphs as inductor's do, without generating code)."""
    tiny = [*TINY, "--pfc-classes", "64", "--steps", "1", "--parts", "steps", "--compile-backend", "eager"]
    runs = {}
    for order in ("full,pfc", "pfc,full"):
        (tmp_path / order).mkdir()
        proc, result = suite([*tiny, "--layers", order], tmp_path / order)
        runs[order] = {r["class_layer"]: r for r in result["rows"]}
        assert [r["class_layer"] for r in result["rows"]] == [
            {"full": "full 16", "pfc": "pfc 0.1 64"}[name] for name in order.split(",")]
        for r in result["rows"]:
            # 1 warm-up + 1 timed step, all through the compiled graph; the FLOPs counted after them
            assert r["template_compiled"] == {"setting": True, "applied": True, "steps_compiled": 2,
                                              "steps_eager": 0, "ran_compiled": True}, r
            assert r["template"]["flops_per_step"] > 0
            assert re.search(rf"^tiny +8  {re.escape(r['class_layer'])} +\| +[\d,.]+ +yes 2/2 ", proc.stdout, re.M)
        pids = [r["pids"]["template"] for r in result["rows"]]
        assert len(set(pids)) == 2 and os.getpid() not in pids
    for layer, row in runs["full,pfc"].items():
        assert row["template_compiled"] == runs["pfc,full"][layer]["template_compiled"]
        assert row["template"]["losses"] == runs["pfc,full"][layer]["template"]["losses"]  # the same steps


def test_a_measurement_whose_process_dies_is_one_line(monkeypatch, tmp_path):
    """A process that ends without a result (killed, a crash in a CUDA library) names the row, its exit code and
    log (the suite prints the line and measures the other rows)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from gpu_suite import process

    script = tmp_path / "dies.py"
    script.write_text("import sys\nprint('Segmentation fault (core dumped)')\nsys.exit(139)\n")
    monkeypatch.setattr(process, "JOB_COMMAND", [sys.executable, str(script)])
    result = process.in_own_process(
        {"side": "template", "backbone": "tiny", "batch": 8, "layer": {"option": "default", "classes": 16}},
        tmp_path)
    assert re.fullmatch(r"template tiny batch 8 full 16: its process exited with code 139 \(Segmentation fault "
                        r"\(core dumped\); log: .*log\.txt\)", result["error"]), result


def test_a_row_out_of_gpu_memory_is_one_line_and_the_other_rows_are_measured(suite_in_process, monkeypatch, capsys):
    import torch
    from gpu_suite import template

    real = template.run

    def run(cfg, classes, *args, **kwargs):
        if classes == 64:  # the partial_fc row does not fit
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.81 GiB")
        return real(cfg, classes, *args, **kwargs)

    monkeypatch.setattr(template, "run", run)
    result = suite_in_process.main([*TINY, "--pfc-classes", "64", "--steps", "1", "--parts", "steps"])
    text = capsys.readouterr().out
    named = [line for line in text.splitlines() if "out of memory" in line]
    assert named == ["template tiny batch 8 pfc 0.1 64: does not fit: CUDA out of memory "
                     "(CUDA out of memory. Tried to allocate 3.81 GiB)"], text
    full, pfc = result["rows"]
    assert full["template"]["images_per_s"] > 0 and pfc["template"] is None


def test_precision_without_bf16_is_one_line_and_the_pipeline_is_still_measured(suite_in_process, monkeypatch,
                                                                               capsys):
    import elasticface.utils.speed

    monkeypatch.setattr(elasticface.utils.speed, "cpu_has_bf16", lambda: False)
    result = suite_in_process.main([*TINY, "--pfc-classes", "0", "--steps", "1", "--precision", "bf16-mixed",
                                    "--parts", "steps,speed,pipeline", "--pipeline-images", "32", "--workers", "0"])
    text = capsys.readouterr().out
    named = [line for line in text.splitlines() if line.startswith("template rows skipped")]
    assert named == ["template rows skipped: this CPU has no bf16 instructions (trainer.precision=bf16-mixed "
                     "would be emulated); rerun with --precision 32-true"], text
    assert result["rows"][0]["template"] is None and result["speed"] == []
    assert result["pipeline"]["cpu_images_per_s"] > 0 and result["pipeline"]["model_images_per_s"] is None


def test_speed_runs_doing_the_same_on_the_gpu_are_measured_once(suite_in_process, tmp_path):
    """`auto` resolved per device: on a GPU the defaults compile and leave the layout to inductor, so the base,
    `model.compile=true` and `model.channels_last=false` are one run; on a CPU the defaults run eagerly in NCHW."""
    from gpu_suite import rows, template
    from gpu_suite.template import Layer

    base = template.overrides("tiny", 8, Layer("default", 16), "cuda", "bf16-mixed", "arcface")

    def key(device, *extra):
        return rows.run_key(template.compose(base + list(extra), tmp_path), device)

    assert key("cuda") == key("cuda", "model.compile=true") == key("cuda", "model.channels_last=false")
    assert key("cuda", "model.compile=false") == key("cuda", "model.compile=false", "model.channels_last=true")
    assert len({key("cuda"), key("cuda", "model.compile=false"), key("cuda", "model.channels_last=true"),
                key("cuda", "model.compile=false", "model.channels_last=false")}) == 4
    assert key("cpu", "model.compile=false") == key("cpu", "model.compile=false", "model.channels_last=false")


def test_settings_picks_the_speed_rows_and_an_unknown_name_is_refused(suite_in_process, capsys):
    result = suite_in_process.main([*TINY, "--steps", "1", "--parts", "speed", "--settings", "channels_last"])
    assert [r["setting"] for r in result["speed"]] == ["channels_last"]
    with pytest.raises(SystemExit):
        suite_in_process.main([*TINY, "--parts", "speed", "--settings", "channels_last,compile"])
    assert "--settings compile: expected some of channels_last, cudnn.benchmark" in capsys.readouterr().err


def test_speed_layers_picks_the_class_layers(suite_in_process, capsys):
    """The tiny layer's 64 classes run chunk_size 32768 as one chunk."""
    result = suite_in_process.main([*TINY, "--pfc-classes", "64", "--steps", "1", "--parts", "speed",
                                    "--speed-layers", "pfc", "--settings", "chunk_size 32768"])
    assert [(r["setting"], r["class_layer"]) for r in result["speed"]] == [("chunk_size 32768", "pfc 0.1 64")]
    assert result["lines"] == []
    with pytest.raises(SystemExit):
        suite_in_process.main([*TINY, "--pfc-classes", "0", "--parts", "speed", "--speed-layers", "pfc"])
    assert "--speed-layers pfc: expected some of full, pfc (pfc needs --pfc-classes)" in capsys.readouterr().err


def test_the_profiler_counts_the_window_s_ops_and_host_reads(suite_in_process):
    """A known step: one matrix product and one `.item()` per step, three steps in the window."""
    import torch
    from gpu_suite.profiling import WindowProfiler

    prof = WindowProfiler("cpu", steps=3)
    a = torch.randn(256, 256)
    a.sum().item()  # before the window: not counted
    prof.start()
    for _ in range(3):
        (a @ a).sum().item()
    prof.stop()
    p = prof.summary()
    mm = next(k for k in p.top if k["name"] == "aten::mm")
    assert mm["calls_per_step"] == 1.0 and 0 < mm["share"] <= 1
    assert p.host_reads_per_step == 1.0 and p.syncs_per_step is None and p.busy is None
    assert sum(k["share"] for k in p.top) <= 1 + 1e-9 and p.window_ms > 0


def test_profile_part_profiles_the_compiled_step_and_the_template_reads_nothing_back(suite_in_process, capsys):
    result = suite_in_process.main([*TINY, "--pfc-classes", "0", "--parts", "profile", "--profile-steps", "2",
                                    "--compile-backend", "eager"])
    text = capsys.readouterr().out
    (side,) = result["profile"]
    assert side["side"] == "template" and side["row"] == "tiny batch 8 full 16" and side["top"]
    assert side["host_reads_per_step"] == 0, "no host read inside the template's steps (tests/test_host_sync.py)"
    # one fit: 1 warm-up + 1 timed + 2 profiled steps, all through the compiled graph
    assert side["compiled"]["ran_compiled"] and side["compiled"]["steps_compiled"] == 4
    assert re.search(r"^  template tiny batch 8 full 16 \(compiled: yes 4/4\): [\d.]+ ms per step under the "
                     "profiler", text, re.M), text
    # the host's sources: the backbone (dense class layer at 16 classes: no chunk loop), the head, the optimizer
    sources = {s["source"]: s for s in side["sources"]}
    for name in ("backbone + neck", "class layer: head", "optimizer step", "Lightning callbacks"):
        assert sources[name]["launches"] > 0 and sources[name]["host_ms"] > 0, name
    assert re.search(r"^      backbone \+ neck +[\d.]+ +[\d.]+ +[\d.]+$", text, re.M), text


def test_the_profiler_names_where_the_host_waits_and_leaves_annotation_ranges_out(suite_in_process):
    """`record_function` ranges (the optimizer's `Optimizer.step#SGD.step`) are laid over the ops they hold: they
    are not work of their own, and on a GPU counting them made the device "192% busy"."""
    import torch
    from gpu_suite.profiling import WindowProfiler, busy_us

    def reads_back(a):
        return (a @ a).sum().item()

    prof = WindowProfiler("cpu", steps=2, stacks=True)
    a = torch.randn(128, 128)
    prof.start()
    for _ in range(2):
        with torch.profiler.record_function("Optimizer.step#SGD.step"):
            reads_back(a)
    prof.stop()
    p = prof.summary()
    assert not any(k["name"].startswith("Optimizer.step") for k in p.top) and p.top
    (site,) = p.wait_sites
    assert re.fullmatch(r"aten::_local_scalar_dense at .*test_gpu_suite\.py\(\d+\): reads_back", site["site"]), site
    assert site["per_step"] == 1.0
    # the device's busy time is the union of its kernels' intervals (streams overlap)
    assert busy_us([(20.0, 25.0), (0.0, 10.0), (5.0, 15.0), (6.0, 7.0)]) == 20.0


def test_a_profile_s_busy_share_is_of_a_window_without_stacks_and_its_wait_sites_of_one_with(suite_in_process,
                                                                                               monkeypatch):
    """Recording Python stacks slowed an H200's compiled template step from 85 to 911 ms, so the busy share of such
    a window is the profiler's, not the step's: the suite takes the figures without stacks, the wait sites with."""
    import torch
    from gpu_suite import job, profiling

    made = []

    class Recorded(profiling.WindowProfiler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(profiling, "WindowProfiler", Recorded)
    a = torch.randn(64, 64)

    def reads_back(prof):
        prof.start()
        for _ in range(2):
            (a @ a).sum().item()
        prof.stop()
        return len(made)

    summary, returned = job.two_pass_profile({"device": "cpu", "profile_steps": 2}, reads_back)
    assert [p.stacks for p in made] == [False, True] and returned == 1  # what the first pass's run returned
    assert summary.window_ms == made[0].window_ms and made[0].summary().wait_sites == []
    (site,) = summary.wait_sites
    assert site["site"].endswith(": reads_back") and site["per_step"] == 1.0


def test_a_stopped_gpu_call_keeps_the_jobs_it_measured(tmp_path):
    """The device tool's limit stops a call with SIGTERM: on an H200 the first call lost every job's result that
    way (the tarball was its last line)."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "TINY": "1", "PARTS": "profile switches suite_train_size"}
    proc = subprocess.run(["timeout", "8", "bash", str(CALL), str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 124 and re.search(r"^call: stopped after \d+ s$", proc.stdout, re.M), proc.stdout
    assert subprocess.run(["tar", "tzf", str(out / "jobs.tar.gz")], capture_output=True).returncode == 0


@pytest.mark.slow  # the prepared GPU call at tiny sizes: the suite at the run's class count, then train.py as typed
def test_the_prepared_gpu_call_measures_the_path_users_run_against_the_suite_row(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "TINY": "1", "PARTS": "suite_train_size train_path"}
    proc = subprocess.run(["bash", str(CALL), str(out), "", "1200"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0 and "== train_path: exit 0" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    path = json.loads((out / "train_path.json").read_text())
    # 3 epochs of 4 steps, each validated and checkpointed; every step through the compiled graph
    assert path["compiled"] is True and path["compiled_steps"] == {"compiled": 12, "eager": 0}
    assert len(path["images_per_second_per_epoch"]) == 3 and path["first_step_seconds"] > 0
    assert {"step0000004.ckpt", "step0000008.ckpt", "step0000012.ckpt"} <= set(path["checkpoints"])
    assert path["ratio"] == pytest.approx(path["images_per_second"] / path["suite_images_per_second"])
    assert path["command"].startswith("python train.py trainer=cpu backbone=tiny data=recordio data.root=")
    assert re.search(r"^  against the suite's row \([\d,.]+ images/s\): [\d.]+x (yes|NO)", proc.stdout, re.M)
    assert (out / "jobs.tar.gz").is_file() and (out / "suite_train_size.json").is_file()


def test_host_work_is_attributed_to_the_named_range_that_launched_it(suite_in_process):
    """A known window on the CPU: per step, three products in the chunk loop, one add in the head, the optimizer's
    two ops in torch's own range; each ATen call counted once under the innermost range that names a source."""
    import torch
    from gpu_suite import host
    from gpu_suite.profiling import WindowProfiler

    a = torch.randn(64, 64)
    prof = WindowProfiler("cpu", steps=2)
    prof.start()
    for _ in range(2):
        with host._range(host.PREFIX + "class layer"):
            with host._range(host.PREFIX + "chunk loop"):
                for _ in range(3):
                    torch.mm(a, a)
            with host._range(host.PREFIX + "head"):
                torch.add(a, 1)
        with torch.profiler.record_function("Optimizer.step#SGD.step"):
            a.mul(2).sub(1)
    prof.stop()
    by = {s["source"]: s for s in prof.summary().sources}
    assert by["class layer: chunk loop"]["launches"] == 3 and by["class layer: head"]["launches"] == 1
    assert by["optimizer step"]["launches"] == 2 and "class layer: targets and loss" in by
    assert by["class layer: targets and loss"]["launches"] == 0  # its ops are all in the ranges inside it
    assert all(s["host_ms"] >= 0 for s in by.values()) and by["class layer: chunk loop"]["host_ms"] > 0
    host.ACTIVE[0] = False
    assert isinstance(host._range("x"), __import__("contextlib").nullcontext), "no range outside a window"


def test_the_device_s_idle_time_goes_to_the_source_of_the_next_launch(suite_in_process):
    """GPU events (made here): a kernel launched from the chunk loop at 0-10 us, then one from a Lightning callback
    at 15-20 us and one from the optimizer at 20-30 us: 5 us of idle device before the callback's kernel, none before
    the optimizer's, over one step."""
    from types import SimpleNamespace as NS

    from gpu_suite import host
    from torch.autograd import DeviceType

    def ev(i, name, start, end, device=DeviceType.CPU, parent=None, link=0):
        return NS(id=i, name=name, device_type=device, time_range=NS(start=start, end=end), cpu_parent=parent,
                  cpu_children=[], thread=1, is_user_annotation=device == DeviceType.CPU, linked_correlation_id=link)

    loop = ev(1, host.PREFIX + "chunk loop", 0, 12)
    mm = ev(2, "aten::mm", 1, 2, parent=loop)
    callback = ev(3, "[Callback]ThroughputMonitor.on_train_batch_end", 12, 16)
    step = ev(4, "Optimizer.step#SGD.step", 16, 19)
    kernels = [ev(10, "gemm", 0, 10, DeviceType.CUDA, link=2), ev(11, "fill", 15, 20, DeviceType.CUDA, link=3),
               ev(12, "sgd", 20, 30, DeviceType.CUDA, link=4)]
    by = {s["source"]: s for s in host.attribute([loop, mm, callback, step, *kernels], steps=1, on_device=True)}
    assert by["class layer: chunk loop"]["launches"] == 1 and by["class layer: chunk loop"]["idle_before_ms"] == 0
    assert by["Lightning callbacks"]["idle_before_ms"] == 5e-3 and by["optimizer step"]["idle_before_ms"] == 0
    assert by["optimizer step"]["device_ms"] == 10e-3 and by["Lightning callbacks"]["host_ms"] == 4e-3


@pytest.mark.slow  # the prepared call's first two parts at tiny sizes: eight measuring processes, about 2 minutes
def test_the_prepared_call_profiles_the_row_and_switches_each_candidate_in_its_own_process(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "TINY": "1", "PARTS": "profile switches"}
    proc = subprocess.run(["bash", str(CALL), str(out), "", "1200"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=1200, env=env)
    assert proc.returncode == 0 and "== switches: exit 0" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    profile = json.loads((out / "profile.json").read_text())
    (row,) = profile["rows"]
    assert row["template_second_run"]["compiled"]["ran_compiled"], "the row run again in its process"
    (side,) = profile["profile"]
    assert {"backbone + neck", "optimizer step", "Lightning callbacks"} <= {s["source"] for s in side["sources"]}
    assert side["wait_sites"] == [], "--no-stacks: no second pass with Python stacks"
    switches = json.loads((out / "switches.json").read_text())
    rows = {r["switch"]: r for r in switches["switches"]}
    # the CPU rows trace with dynamo's eager backend, which CUDA graphs cannot use: one line, the others measured
    (line,) = [x for x in switches["lines"] if x.startswith("switch cuda graphs:")]
    assert "model.compile_mode=reduce-overhead: the modes are inductor options" in line
    assert set(rows) == {"baseline", "gc frozen", "gc off", "cudnn.benchmark off", "allocator expandable",
                         "long warm-up", "second run"}
    assert len({r["pid"] for r in rows.values()}) == len(rows), "each switch in a process of its own"
    assert rows["baseline"]["vs_baseline"] == 1.0 and all(r["keeps_result"] for r in rows.values())
    assert all(r["compiled"]["ran_compiled"] for r in rows.values())
    assert rows["second run"]["second_run"]["measured"]["seconds_per_step"] > 0
    assert rows["long warm-up"]["compiled"]["steps_compiled"] == 101  # 100 warm-up + 1 timed


def test_switches_left_out_for_time_are_one_line_each(suite_in_process, capsys):
    """--seconds: the first switch always runs; a switch that the time left cannot hold is named, not started."""
    result = suite_in_process.main([*TINY, "--pfc-classes", "0", "--steps", "1", "--parts", "switches",
                                    "--switches", "baseline,gc frozen,gc off", "--seconds", "0.001",
                                    "--compile-backend", "eager"])
    assert [r["switch"] for r in result["switches"]] == ["baseline"]
    assert [x.split(" (")[0] for x in result["lines"]] == ["switch gc frozen: left out", "switch gc off: left out"]
