"""launcher=slurm's launcher (Hydra takes launchers only from `hydra_plugins`): hydra-submitit-launcher's SLURM
launcher, checked before anything is queued, and a sweep that outlives any one of its jobs.

- Before a job is queued: `sbatch` is on PATH, the time limit is longer than SLURM's warning before it
  (`signal_delay_s`), and `sbatch --test-only` accepts the request (partition, account, GPUs, memory, time);
  otherwise one line names the key and what the cluster said, and nothing is queued.
- While the sweep runs, every job is waited for. One that SLURM ends without a result (`scancel`, a node
  failure, a timeout past `max_num_timeout`) is named with its overrides and state once all are done; the
  others finish. The stock launcher raised at the first such job, and waited forever on a cluster without
  accounting (its watcher asks `sacct`, which fails there, e.g. on `make slurm-up`'s): `squeue` answers here.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from omegaconf import OmegaConf

from elasticface.utils.slurm_checks import check_clients, check_request, check_time_limit

try:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
except ImportError:  # no `cluster` extra: not a plugin then (Hydra imports this module for every command), and
    SubmititSlurmLauncher = object  # launcher=slurm stops before Hydra, naming the extra (cli/preflight.py)

log = logging.getLogger(__name__)

#: squeue states of a job that will not run again (a requeued job is PENDING or REQUEUED, not here)
ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "TIMEOUT", "SPECIAL_EXIT", "REVOKED"}
PROG = "elasticface-train"


def fail(message: str, status: int = 2) -> None:
    """One line on stderr and the exit status; no Hydra traceback (SystemExit passes through it)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(status)


def queue_states(job_ids: Sequence[str]) -> dict[str, str]:
    """job id (`123` or `123_4`) -> its state as squeue shows it (finished jobs stay listed for MinJobAge)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(job_ids)],
                         capture_output=True, text=True)
    states = {}
    for line in out.stdout.splitlines():
        job_id, _, state = line.strip().partition(" ")
        states[job_id] = state.strip()
    return states


def quiet_watcher_without_accounting() -> None:
    """Without accounting, submitit's watcher runs `sacct` every few seconds and prints its refusal each time;
    switched off here, `squeue` (wait_for_all) tells when a job ended."""
    if shutil.which("sacct") is None or subprocess.run(["sacct", "-n", "-j", "1"], capture_output=True).returncode:
        from submitit.slurm.slurm import SlurmJob

        SlurmJob.watcher._make_command = lambda: None
        log.info("this cluster keeps no accounting (sacct): jobs are watched with squeue")


class SlurmLauncher(SubmititSlurmLauncher):  # type: ignore[misc,valid-type]
    """hydra-submitit-launcher's SlurmLauncher with the checks and the waiting above; jobs run its `__call__`."""

    def executor(self) -> Any:
        """The submitit executor with this launcher's parameters, exactly as the stock `launch` builds it."""
        import submitit

        init_keys = {"max_num_timeout", "submitit_folder"}
        executor = submitit.AutoExecutor(cluster="slurm", folder=self.params["submitit_folder"],
                                         slurm_max_num_timeout=self.params.get("max_num_timeout", 0))
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{key if key in base else f"slurm_{key}": value
                                      for key, value in self.params.items() if key not in init_keys})
        return executor

    def preflight(self) -> Any:
        """Everything that can be known before a job is queued (exits with one line when it fails); the executor."""
        problem = check_time_limit(self.params.get("timeout_min"), self.params.get("signal_delay_s")) or check_clients()
        if problem is not None:
            fail(problem)
        executor = self.executor()
        with tempfile.TemporaryDirectory() as folder:
            script = Path(folder) / "test_only.sh"
            script.write_text(executor._executor._make_submission_file_text("true", "test_only"))
            problem = check_request(script, self.params)
        if problem is not None:
            fail(problem)
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and len(job_overrides) > 0
        executor = self.preflight()
        quiet_watcher_without_accounting()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        log.info(f"Submitit 'slurm' sweep output dir : {sweep_dir}")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        names, job_params = job_names(job_overrides, initial_job_idx), []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*job_params))
        ended = wait_for_all(jobs)
        returns, failed = [], []
        for name, job in zip(names, jobs):
            if job.job_id in ended:
                failed.append(f"{name} (SLURM job {job.job_id}: {ended[job.job_id]})")
                continue
            try:
                returns.append(job.results()[0])
            except Exception as err:  # the job's own error, or submitit's "not requeued because ..."
                failed.append(f"{name} (SLURM job {job.job_id}: {str(err).strip().splitlines()[-1][:300]})")
        if failed:
            for line in failed:
                log.error("did not finish: %s", line)
            fail(f"{len(failed)} of {len(jobs)} jobs did not finish: {'; '.join(failed)}. The others are in "
                 f"{sweep_dir}; the same command with hydra.sweep.dir={sweep_dir} finishes them "
                 "(resume=auto skips finished jobs and continues the others from their last checkpoint)", status=1)
        return returns


def job_names(job_overrides: Sequence[Sequence[str]], first: int) -> list[str]:
    """`#1 head=elastic_arc`: a job's number and the overrides that tell it from the sweep's other jobs."""
    values: dict[str, set[str]] = {}
    for overrides in job_overrides:
        for override in filter_overrides(overrides):
            key, _, value = override.partition("=")
            values.setdefault(key, set()).add(value)
    varying = {key for key, seen in values.items() if len(seen) > 1 or len(job_overrides) == 1}
    return [f"#{idx} " + " ".join(o for o in filter_overrides(overrides) if o.partition("=")[0] in varying)
            for idx, overrides in enumerate(job_overrides, start=first)]


def wait_for_all(jobs: Sequence[Any], poll_s: float = 2.0) -> dict[str, str]:
    """Wait until every job has a result or has ended without one; returns the latter: job id -> SLURM state."""
    pending = {job.job_id: job for job in jobs}
    ended: dict[str, str] = {}
    while pending:
        for job_id in [j for j, job in pending.items() if job.done()]:
            del pending[job_id]
        if not pending:
            break
        states = queue_states(list(pending))
        for job_id, state in states.items():
            if job_id in pending and state in ENDED and not pending[job_id].done():
                ended[job_id] = state
                del pending[job_id]
        time.sleep(poll_s)
    return ended
