"""One measurement in a process of its own: a figure must not depend on what ran before it (job.py says why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: benchmarks/, where the package and the flat bench_*.py scripts it imports live
BENCHMARKS = Path(__file__).resolve().parents[1]
#: what each measuring process runs, followed by JOB.json RESULT.json
JOB_COMMAND = [sys.executable, "-m", "gpu_suite.job"]


def in_own_process(job: dict, out: Path) -> dict:
    """One measurement in a fresh Python process (job.py), so that nothing measured before it can change it
    (dynamo's caches and skipped frames, cuDNN's autotuner, the allocator): its result, or an error line. The job's
    `env` (a switch's variables, e.g. the allocator's) is added to this process's environment."""
    from gpu_suite.job import what

    folder = Path(tempfile.mkdtemp(prefix=f"{job['side']}_{job['backbone']}_{job['batch']}_", dir=out))
    job = {**job, "out_dir": str(folder)}
    job_file, result_file, log_file = folder / "job.json", folder / "result.json", folder / "log.txt"
    job_file.write_text(json.dumps(job, indent=1))
    with log_file.open("w") as log:
        path = os.pathsep.join([str(BENCHMARKS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **job.get("env", {})}
        started = time.perf_counter()
        proc = subprocess.run([*JOB_COMMAND, str(job_file), str(result_file)], stdout=log, stderr=subprocess.STDOUT,
                              env=env)
    if result_file.is_file():
        # the process's whole time (start-up, compilation, steps): what the next call's budget needs
        return {**json.loads(result_file.read_text()), "process_seconds": time.perf_counter() - started}
    last = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()][-1:] or [""]
    return {"error": f"{what(job)}: its process exited with code {proc.returncode} ({last[0].strip()[:200]}; "
                     f"log: {log_file})"}
