"""Compiled training under AVX2 kernels and one thread, every backbone option with every head: finite.

A compiled template step diverged to NaN at step 0 under one thread and AVX2 kernels (the GPU suite's CPU rows,
on an AVX2-only host), so `model.compile=cpu` trains eagerly where torch's kernels are AVX2
(`elasticface.utils.speed.EAGER_CPU_LEVELS`). This grid is the evidence a change of that rule needs: on an
AVX-512 host it emulates an AVX2 one as closely as torch allows (ATEN_CPU_CAPABILITY=avx2 for the eager kernels
and inductor's vector ISA, TORCHINDUCTOR_CPP_MARCH=x86-64-v3 so the C++ compiler emits no AVX-512 of its own,
a fresh inductor cache) and forces compile with `model.compile=true`. Slow: one compile per backbone, 6 minutes
for `tiny` and 12 for iresnet18 on 2 cores, hours for the whole grid: `make test-slow` runs `tiny`;
ELASTICFACE_COMPILE_GRID=all runs every backbone option (iresnet18 and tiny passed here, docs/compile.md).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from elasticface.heads.registry import head_names

ALL_BACKBONES = sorted(p.stem for p in (ROOT / "configs" / "backbone").glob("*.yaml"))
BACKBONES = ALL_BACKBONES if os.environ.get("ELASTICFACE_COMPILE_GRID") == "all" else ["tiny"]


def avx2_environment(cache: str) -> dict[str, str]:
    return {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",
            "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


@pytest.mark.slow
@pytest.mark.parametrize("backbone", BACKBONES)
def test_compiled_training_is_finite_under_avx2_for_every_head(backbone, tmp_path):
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip(f"torch's kernels here are {torch.backends.cpu.get_cpu_capability()}: no AVX2 to select")
    heads = head_names()
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "debug=tiny", f"backbone={backbone}",
                          f"head={','.join(heads)}", "model.compile=true", "trainer.max_epochs=1",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}", "logger=[]"],
                         cwd=tmp_path, env=avx2_environment(str(tmp_path / "inductor")), capture_output=True,
                         text=True, timeout=3600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").rglob("summary.json"))]
    assert sorted(s["head"] for s in summaries) == sorted(heads)
    for s in summaries:
        assert s["compile"] is True and s["compiled"] is True and s["weights_finite"] is True, (backbone, s["head"])
        assert math.isfinite(s["val/acc_mean"]["final"]) and s["global_step"] > 0, (backbone, s["head"])


@pytest.mark.slow
def test_avx2_and_avx512_runs_share_an_inductor_cache(tmp_path):
    """One TORCHINDUCTOR_CACHE_DIR for an AVX2 run, then an AVX-512 one (a shared cluster home, or a test
    machine emulating AVX2): without a folder per vector ISA the second run compiled the first one's cached
    kernel code for its own vector width and died of a segfault at its first compiled step."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("needs AVX-512 kernels to compare with AVX2 ones")
    cache = str(tmp_path / "inductor")
    for level in ("avx2", "avx512"):
        env = {**avx2_environment(cache), "ATEN_CPU_CAPABILITY": level}
        env.pop("TORCHINDUCTOR_CPP_MARCH")
        out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=tiny", "backbone=toy",
                              "data.image_size=16", "model.compile=true", f"hydra.run.dir={tmp_path / level}",
                              "logger=[]"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
        assert out.returncode == 0, (level, out.returncode, out.stdout[-2000:] + out.stderr[-3000:])
        summary = json.loads((tmp_path / level / "summary.json").read_text())
        assert summary["compiled"] is True and summary["weights_finite"] is True, level
    folders = sorted(p.name for p in (tmp_path / "inductor").glob("isa-*"))  # beside them: the ISA probes' kernels
    assert len(folders) == 2 and folders[0] == "isa-avx2" and folders[1].startswith("isa-avx512"), folders
