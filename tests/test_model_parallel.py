"""Model-parallel class centres: 2 and 3 gloo processes against one process over the same global batch.

The reference is the unsharded computation written out here (all centres, the head, F.cross_entropy);
the workers run `margin_softmax_loss` on `ShardedFC` shards. Loss, embedding and centre gradients
must agree to 1e-5 relative, over two steps so that head state (AdaCos scale, CurricularFace t,
the margin stream) is checked too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from elasticface.classifier import Classifier
from elasticface.classifier.centers import FullFC
from elasticface.classifier.distributed import shard_bounds
from elasticface.heads import build_head
from elasticface.classifier.dense import margin_softmax_loss
from elasticface.classifier.sharded import ShardedFC

C, D, N, STEPS = 10, 8, 12, 2
HEADS: dict[str, dict] = {
    "arcface": {},
    "cosface": {},
    "elastic_arc_plus": {"seed": 5},
    "elastic_arc_plus_official": {"seed": 5, "plus_assignment": "official"},
    "adacos": {},
    "curricularface": {},
    "subcenter_arcface": {"k": 3},
    "magface": {},
}
#: heads checked only on the chunked path (the dense sharded path is checked on HEADS)
CHUNKED_HEADS: dict[str, dict] = {**HEADS, "mv_softmax": {}, "circle": {}, "li_arcface": {}, "adaface": {},
                                  "elastic_cos_plus": {"seed": 3}}
PATHS = {"dense": HEADS, "chunked": CHUNKED_HEADS}


def _head(case: str):
    name = "elastic_arc_plus" if case.startswith("elastic_arc_plus") else case
    return build_head(name, **CHUNKED_HEADS[case])


def _inputs(case: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + len(case))
    # MagFace: norms in [10, 110]
    emb = torch.randn(N, D, generator=g) * (8.0 if case in ("magface", "adaface") else 1.0)
    labels = torch.randint(0, C, (N,), generator=g)
    labels[3] = -1  # a row without a label: ignored by the loss and by every batch statistic
    return emb, labels


def _centres(k: int) -> torch.Tensor:
    return torch.randn(C * k, D, generator=torch.Generator().manual_seed(7))


def reference(case: str) -> list[dict[str, torch.Tensor]]:
    """One process, all centres: what the sharded run must reproduce."""
    head = _head(case).train()
    k = head.centers_per_class
    layer = FullFC(D, C, centers_per_class=k)
    layer.weight.data.copy_(_centres(k))
    out = []
    for step in range(STEPS):
        emb, labels = _inputs(case, step)
        emb.requires_grad_(True)
        layer.weight.grad = None
        norms = emb.norm(dim=1) if head.needs_norms else None
        logits, plan = head.logits(layer(emb, labels)[0], labels, norms)
        loss = F.cross_entropy(logits, labels, ignore_index=-1)
        if plan.aux_loss is not None:
            loss = loss + plan.aux_loss
        loss.backward()
        out.append({"loss": loss.detach(), "emb_grad": emb.grad, "centre_grad": layer.weight.grad.clone()})
    return out


def _init(rank: int, world: int, init_file: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)


def _exactness_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    _init(rank, world, init_file)
    rows = N // world
    results = {}
    for path, heads in PATHS.items():
        for case in heads:
            head = _head(case).train()
            k = head.centers_per_class
            layer = ShardedFC(D, C, centers_per_class=k)
            layer.weight.data.copy_(_centres(k))
            layer.shard(rank, world)
            classifier = Classifier(layer, head, chunk_size=3, path="chunked")
            steps = []
            for step in range(STEPS):
                emb, labels = _inputs(case, step)
                local = emb[rank * rows : (rank + 1) * rows].clone().requires_grad_(True)
                layer.weight.grad = None
                if path == "dense":
                    out = margin_softmax_loss(layer, head, local, labels[rank * rows : (rank + 1) * rows])
                    out.loss.backward()
                    emb_grad = local.grad
                else:
                    out = classifier(local, labels[rank * rows : (rank + 1) * rows])
                    out.loss.backward()
                    emb_grad = local.grad / world  # the classifier pre-scales for DDP's average over ranks
                steps.append({"loss": out.loss.detach(), "emb_grad": emb_grad,
                              "centre_grad": layer.weight.grad.clone(), "rows": layer.row_slice})
            results[(path, case)] = steps
    # Partial FC sampled on each shard: every positive of the global batch keeps its column somewhere
    layer = ShardedFC(D, 200, sample_rate=0.05)
    layer.shard(rank, world)
    labels = torch.arange(0, 200, 7)[: 2 * world * 2]
    per_rank = labels.numel() // world
    emb_all, labels_all, shard = layer.gather_batch(torch.randn(per_rank, D),
                                                    labels[rank * per_rank: (rank + 1) * per_rank])
    cos, mapped = layer(emb_all, labels_all)
    owned = (labels_all >= layer.class_start) & (labels_all < layer.class_stop)
    results["sampled"] = {
        "owned_have_column": bool(((mapped >= 0) == owned).all()),
        "targets_match": bool(
            (layer.last_sampled_classes[mapped[owned]] + layer.class_start == labels_all[owned]).all()
        ),
        "columns": cos.shape[1],
        "local_classes": layer.num_local_classes,
        "covered": int(shard.sum((mapped >= 0).float()).min()),
    }
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    dist.destroy_process_group()


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_sharded_heads_match_one_process(world, tmp_path):
    mp.spawn(_exactness_worker, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]
    rows = N // world
    for path, case in [(p, c) for p, heads in PATHS.items() for c in heads]:
        ref = reference(case)
        for step in range(STEPS):
            for rank, res in enumerate(results):
                got = res[(path, case)][step]
                where = (path, case, step, rank)
                assert _relative_error(got["loss"], ref[step]["loss"]) < 1e-5, where
                own_rows = ref[step]["emb_grad"][rank * rows : (rank + 1) * rows]
                assert _relative_error(got["emb_grad"], own_rows) < 1e-5, where
                assert _relative_error(got["centre_grad"], ref[step]["centre_grad"][got["rows"]]) < 1e-5, where
            # each rank's centre gradient is its own slice: together they tile the full gradient
            full = torch.cat([res[(path, case)][step]["centre_grad"] for res in results])
            assert full.shape == ref[step]["centre_grad"].shape
    for rank, res in enumerate(results):
        sampled = res["sampled"]
        assert sampled["owned_have_column"] and sampled["targets_match"], rank
        assert sampled["columns"] < sampled["local_classes"]  # it did sample
        assert sampled["covered"] == 1  # every row's target lives in exactly one rank's columns


# -- resume on another number of processes ---------------------------------------------------------
RESUME_C, RESUME_N, RESUME_STEPS = 7, 6, 2


def _resume_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(RESUME_N, 5, generator=g), torch.randint(0, RESUME_C, (RESUME_N,), generator=g)


class _Net(torch.nn.Module):
    """Backbone, centres and head in one module, which DDP wraps as Lightning wraps the LightningModule."""

    def __init__(self, backbone: torch.nn.Module, centers: ShardedFC, head: torch.nn.Module) -> None:
        super().__init__()
        self.backbone, self.centers, self.head = backbone, centers, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)


def _resume_worker(rank: int, world: int, init_file: str, out_dir: str, ckpt: str, phase: str) -> None:
    """Train a linear backbone + ShardedFC with SGD momentum; 'save' writes a checkpoint after two steps."""
    from torch.nn.parallel import DistributedDataParallel

    from elasticface.utils.distributed import scale_grad

    _init(rank, world, init_file)
    torch.manual_seed(0)
    backbone = torch.nn.Linear(5, D)
    layer = ShardedFC(D, RESUME_C, centers_per_class=2)
    head = build_head("subcenter_elastic_arc_plus", k=2, seed=1)
    if world > 1:
        layer.shard(rank, world)
    model = _Net(backbone, layer, head)
    model._ddp_params_and_buffers_to_ignore = ["centers.weight"]  # as FaceRecognitionModule.setup does
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    first = 0
    if phase == "resume":
        checkpoint = torch.load(ckpt, weights_only=False)
        layer.slice_checkpoint(checkpoint, "centers.weight")
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_states"][0])
        first = RESUME_STEPS
    losses = []
    for step in range(first, 2 * RESUME_STEPS):
        if phase == "save" and step == RESUME_STEPS:
            checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}
            layer.gather_checkpoint(checkpoint, "centers.weight", [optimizer])
            if rank == 0:
                torch.save(checkpoint, ckpt)
            dist.barrier()
        x, labels = _resume_batch(step)
        rows = RESUME_N // world
        emb = ddp_model(x[rank * rows : (rank + 1) * rows])
        if layer.is_sharded:
            emb = scale_grad(emb, world)  # as the LightningModule does: DDP averages the backbone's gradient
        optimizer.zero_grad()
        out = margin_softmax_loss(layer, head, emb, labels[rank * rows : (rank + 1) * rows])
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.detach())
    final = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    layer.gather_checkpoint(final, "centers.weight", [optimizer])
    if rank == 0:
        torch.save({"losses": losses, "centres": final["state_dict"]["centers.weight"],
                    "momentum": final["optimizer_states"][0]["state"][2]["momentum_buffer"],
                    "backbone": backbone.weight.detach().clone()}, Path(out_dir) / f"{phase}{world}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_checkpoint_of_two_processes_resumes_on_three_and_one(tmp_path):
    ckpt = str(tmp_path / "two.ckpt")
    runs = [(2, "save"), (3, "resume"), (1, "resume")]
    for i, (world, phase) in enumerate(runs):
        mp.spawn(_resume_worker, args=(world, str(tmp_path / f"init{i}"), str(tmp_path), ckpt, phase),
                 nprocs=world, join=True)
    saved = torch.load(ckpt, weights_only=False)
    assert saved["state_dict"]["centers.weight"].shape == (RESUME_C * 2, D)  # full centres, not a shard
    assert saved["optimizer_states"][0]["state"][2]["momentum_buffer"].shape == (RESUME_C * 2, D)
    two = torch.load(tmp_path / "save2.pt", weights_only=False)
    for world in (3, 1):
        other = torch.load(tmp_path / f"resume{world}.pt", weights_only=False)
        assert len(other["losses"]) == RESUME_STEPS
        for a, b in zip(other["losses"], two["losses"][RESUME_STEPS:]):
            assert _relative_error(a, b) < 1e-5, world
        for key in ("centres", "momentum", "backbone"):
            assert _relative_error(other[key], two[key]) < 1e-5, (world, key)


# -- single process and bad input (fast) -----------------------------------------------------------
def test_shard_bounds_spread_the_remainder_over_the_first_ranks():
    assert [shard_bounds(10, 3, r) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]
    assert [shard_bounds(4, 4, r) for r in range(4)] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_empty_shard_is_refused_with_the_numbers():
    with pytest.raises(ValueError, match=r"world size 5 > num_classes=4.*at most 4 processes"):
        ShardedFC(D, 4).shard(0, 5)


def test_label_beyond_num_classes_is_refused():
    layer = ShardedFC(D, 5).train()
    with pytest.raises(ValueError, match=r"label 5 .* must be < num_classes=5"):
        layer.check_labels(torch.tensor([0, 5, 1]))  # what a sharded forward runs on the gathered labels
    layer.check_labels(torch.tensor([0, 4, -1]))


def test_one_process_sharded_fc_is_partial_fc():
    torch.manual_seed(0)
    emb, labels = torch.randn(6, D), torch.tensor([0, 3, 3, 9, -1, 2])
    full = ShardedFC(D, C, sample_rate=1.0)
    cos, mapped = full(emb, labels)
    assert torch.equal(cos, FullFC.logits(full, emb, full.weight)) and torch.equal(mapped, labels)
    sampled = ShardedFC(D, 100, sample_rate=0.1).train()
    cos, mapped = sampled(emb, labels)
    assert cos.shape == (6, 10) and torch.equal(sampled.last_sampled_classes[mapped[labels >= 0]], labels[labels >= 0])


@pytest.mark.parametrize("num_classes,world,rate,batch", [(100, 3, 0.1, 6), (100, 3, 0.1, 40), (10, 3, 0.5, 2),
                                                           (10, 4, 1.0, 5)])
def test_columns_of_all_ranks_are_known_without_asking_them(num_classes, world, rate, batch):
    """The count the heads get as C (AdaCos) equals the columns each rank's step actually samples."""
    torch.manual_seed(0)
    labels = torch.randint(0, num_classes, (batch,))
    seen = 0
    for rank in range(world):
        layer = ShardedFC(D, num_classes, sample_rate=rate)
        layer.shard(rank, world)
        weight, _ = layer.train().columns(labels)
        seen += weight.shape[0]
    assert layer.num_columns_all_ranks(batch) == seen


def test_checkpoint_for_another_number_of_classes_is_refused(tiny_cfg):
    from elasticface.training import build_module

    module = build_module(tiny_cfg("model=model_parallel"), num_classes=9)
    msg = r"hold 8 classes \(8 rows of classifier.centers.weight\) but the training data has num_classes=9"
    with pytest.raises(ValueError, match=msg):
        module.on_load_checkpoint({"state_dict": {"classifier.centers.weight": torch.zeros(8, 32)}})
    module.on_load_checkpoint({"state_dict": {"classifier.centers.weight": torch.zeros(9, 32)}})


@pytest.mark.slow
def test_lightning_ddp_trains_on_two_processes_and_resumes_on_three(tmp_path):
    """The documented commands: `trainer=ddp_cpu trainer.devices=2 model=model_parallel`, then resume on 3."""
    from conftest import ROOT, TINY

    from elasticface.eval.embed import load_module

    first, second = tmp_path / "two", tmp_path / "three"
    base = [sys.executable, "train.py", *TINY, "trainer=ddp_cpu", "model=model_parallel", "head=elastic_arc_plus"]
    out = subprocess.run([*base, "trainer.devices=2", f"hydra.run.dir={first}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    steps = json.loads((first / "summary.json").read_text())["global_step"]
    ckpt = first / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, weights_only=False)
    record = saved["class_centres"]
    assert saved["state_dict"]["classifier.centers.weight"].shape == (8, 32) and record["rows"] == 8
    assert saved["optimizer_states"][0]["state"][record["optimizer_param_ids"][0]]["momentum_buffer"].shape == (8, 32)
    out = subprocess.run([*base, "trainer.devices=3", f"ckpt_path={ckpt}", "trainer.max_epochs=3",
                          f"hydra.run.dir={second}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((second / "summary.json").read_text())["global_step"] > steps
    resumed = torch.load(second / "checkpoints" / "last.ckpt", weights_only=False)
    assert resumed["state_dict"]["classifier.centers.weight"].shape == (8, 32)
    key = "classifier.centers.weight"
    assert not torch.equal(resumed["state_dict"][key], saved["state_dict"][key])
    module = load_module(str(second / "checkpoints" / "last.ckpt"))  # eval/embed/export read it as any checkpoint
    assert module(torch.zeros(2, 3, 112, 112)).shape == (2, 32)


def _bench_rows(*args: str) -> tuple[str, dict[int, list[float]]]:
    from conftest import ROOT

    out = subprocess.run([sys.executable, "benchmarks/bench_centers.py", "--classes", "50000", "--dim", "128",
                          "--batch", "8", "--steps", "2", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.strip("|").split("|") for line in out.stdout.splitlines() if line[:3] in ("| 2", "| 4")]
    return out.stdout, {int(r[0]): [float(x.replace(",", "")) for x in r[1:]] for r in rows}


@pytest.mark.slow
def test_bench_centers_prints_ratios_against_full_centres_in_the_same_run():
    """The benchmark as documented: beside each world, and with the baseline measured once (--baseline-world 1)."""
    _, beside = _bench_rows("--worlds", "2")
    text, once = _bench_rows("--worlds", "2", "4", "--baseline-world", "1")
    assert "full centres measured once with 1 process(es)" in text
    for rows in (beside, once):
        for world, (full, sharded, memory_ratio, goal_ratio, full_s, sharded_s, time_ratio) in rows.items():
            assert memory_ratio == pytest.approx(sharded / full, rel=0.02)  # the table rounds MiB
            assert time_ratio == pytest.approx(sharded_s / full_s, rel=0.02)
            # at this size fixed costs (gloo, allocator) blur the goal; docs/class_layer.md has the C = 1M figures
            assert goal_ratio < 1.5 / world and memory_ratio < 1.5 / world, (world, rows)
    assert once[2][0] == once[4][0] and once[4][1] < once[2][1]  # one baseline; the shard shrinks with world
