"""Two nodes, as a new user starts them: `torchrun --nnodes 2 ... train.py trainer=ddp_cpu trainer.num_nodes=2`
once per node (here both on this machine, node ranks 0 and 1), with the static and the c10d rendezvous.

Checked: one run directory holding one summary.json; the distributed sampler hands every training sample
to exactly one rank per epoch; sample shards and class-centre shards follow the global rank; the run's
last.ckpt resumes in one process; a `trainer.num_nodes` that disagrees with the launcher is refused.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, compose_train

HELPERS = ROOT / "tests" / "helpers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_two_nodes(cwd, rendezvous: str, *overrides: str) -> list[subprocess.CompletedProcess]:
    """`torchrun --nnodes 2 --nproc-per-node 1 ... train.py trainer=ddp_cpu trainer.num_nodes=2 trainer.devices=1
    debug=tiny` started twice from `cwd`, as two nodes would (`python -m torch.distributed.run` is torchrun)."""
    port = free_port()
    if rendezvous == "static":

        def launch(rank: int) -> list[str]:
            return ["--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    else:

        def launch(rank: int) -> list[str]:
            return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "elasticface-test"]

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")]),
        "WANDB_SILENT": "true",
        "OMP_NUM_THREADS": "1",
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                *launch(rank),
                str(ROOT / "train.py"),
                "trainer=ddp_cpu",
                "trainer.num_nodes=2",
                "trainer.devices=1",
                "debug=tiny",
                *overrides,
            ],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=900)
        outs.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, ""))
    for out in outs:
        assert out.returncode == 0, out.stdout[-4000:]
    return outs


def check_one_run(cwd, records) -> dict:
    runs = sorted((cwd / "logs" / "train" / "runs").iterdir())
    assert len(runs) == 1, f"one run directory for both nodes, found {[r.name for r in runs]}"
    summaries = list(cwd.rglob("summary.json"))
    assert summaries == [runs[0] / "summary.json"], summaries
    by_epoch: dict[int, list[dict]] = {}
    for path in sorted(records.glob("rank*_epoch*.json")):
        r = json.loads(path.read_text())
        by_epoch.setdefault(r["epoch"], []).append(r)
    assert sorted(by_epoch) == [0, 1], "debug=tiny trains 2 epochs"
    for epoch, ranks in by_epoch.items():
        assert sorted(r["global_rank"] for r in ranks) == [0, 1]
        for r in ranks:
            assert r["world_size"] == 2 and r["node_rank"] == r["global_rank"]  # one process per node
            assert (r["sampler_rank"], r["sampler_replicas"]) == (r["global_rank"], 2), (
                "the shard follows the global rank"
            )
        size = ranks[0]["dataset_size"]
        seen = sorted(i for r in ranks for i in r["indices"])
        assert seen == list(range(size)), f"epoch {epoch}: every sample once across the nodes"
        # torch's DistributedSampler rule, written out: a permutation seeded with seed + epoch, rank r taking
        # every world-th index from position r
        perm = torch.randperm(size, generator=torch.Generator().manual_seed(42 + epoch)).tolist()
        for r in ranks:
            assert r["indices"] == perm[r["global_rank"] :: 2], f"epoch {epoch}, rank {r['global_rank']}"
    return {"run": runs[0], "records": by_epoch}


@pytest.mark.slow
@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_two_nodes_train_into_one_run_and_resume_on_one(tmp_path, rendezvous):
    records = tmp_path / "records"
    torchrun_two_nodes(
        tmp_path,
        rendezvous,
        "+callbacks.record._target_=sample_record.RecordSamples",
        f"+callbacks.record.path={records}",
    )
    run = check_one_run(tmp_path, records)["run"]
    summary = json.loads((run / "summary.json").read_text())
    ckpt = run / "checkpoints" / "last.ckpt"
    assert ckpt.exists() and summary["global_step"] > 0
    # the two-node run continues in one process on one node
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "debug=tiny",
            f"ckpt_path={ckpt}",
            "trainer.max_epochs=3",
            f"hydra.run.dir={tmp_path / 'resumed'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    resumed = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert resumed["global_step"] > summary["global_step"]


@pytest.mark.slow
def test_two_nodes_with_model_parallel_centres_shard_by_global_rank(tmp_path):
    records = tmp_path / "records"
    torchrun_two_nodes(
        tmp_path,
        "static",
        "model=model_parallel",
        "+callbacks.record._target_=sample_record.RecordSamples",
        f"+callbacks.record.path={records}",
    )
    by_epoch = check_one_run(tmp_path, records)["records"]
    for r in by_epoch[0]:
        shard = r["shard"]
        c, rank = shard["num_classes"], r["global_rank"]
        # classes split in global-rank order, the first C % world ranks one class more (written out, not imported)
        per, extra = divmod(c, 2)
        start = rank * per + min(rank, extra)
        assert (shard["rank"], shard["world"]) == (rank, 2)
        assert (shard["class_start"], shard["class_stop"]) == (start, start + per + (rank < extra))


def test_num_nodes_that_disagrees_with_the_launcher_is_refused(tmp_path, monkeypatch):
    from elasticface.training import build_trainer

    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = compose_train(["debug=tiny", "trainer=ddp_cpu", "trainer.devices=1", "trainer.num_nodes=1"], tmp_path)
    with pytest.raises(
        ValueError,
        match=r"trainer.num_nodes=1 x trainer.devices=1 = 1 processes, but the launcher "
        r"started WORLD_SIZE=2",
    ):
        build_trainer(cfg)


def test_slurm_launcher_on_two_nodes_composes(tmp_path):
    """The README's SLURM form: `python train.py -m launcher=slurm hydra.launcher.nodes=2`; the trainer follows the
    request (resolved as the job sees it: `trainer.num_nodes` and `devices` read `hydra.launcher`)."""
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "launcher=slurm",
            "hydra.launcher.nodes=2",
            "--cfg",
            "all",
            "--resolve",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(out.stdout)
    assert cfg.hydra.launcher.nodes == cfg.trainer.num_nodes == 2
    assert cfg.hydra.launcher.tasks_per_node == cfg.trainer.devices
