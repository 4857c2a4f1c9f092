"""Per-rank memory and step time of the class layer: model parallel (ShardedFC) vs DDP with full centres.

For each world size W the script starts W processes (torch.multiprocessing + gloo on CPU, NCCL with
``--device cuda``, one GPU per rank). Every rank runs, one after the other:

- ``full``: the baseline. All C centres (``FullFC``) on every rank inside DDP: its local batch of B
  embeddings, ArcFace, cross-entropy, backward (DDP all-reduces the [C, D] gradient), SGD with momentum.
- ``sharded``: ``ShardedFC`` with C/W centres on each rank: the embeddings and labels of all ranks
  are gathered (W·B rows), ArcFace on the local columns, the cross-entropy reduced across ranks,
  backward, SGD with momentum on the shard only.

The full baseline's per-rank memory does not depend on W (every rank holds all C centres and its own
B rows), so where W copies of it do not fit in one machine (C = 1M is about 18 GB per rank on CPU)
``--baseline-world 1`` measures it once, as DDP over a one-process group, and every W is compared
with that. Its step time then has no all-reduce in it, so the time ratio flatters the baseline.

Memory is the class layer's: the peak over ``--steps`` steps (forward, backward, optimizer step, so
momentum exists) minus the memory before the layer was built; the one-time construction of the full
matrix before sharding (host memory, see docs/class_layer.md) is left out by resetting the peak after `shard`.
On CPU it is the resident set (VmHWM after /proc/self/clear_refs), on CUDA max_memory_allocated (see
bench_heads.py). ``goal`` is the full layer's memory / W plus the gathered batch (embeddings, their
gradient and the [W·B, C/W] logits with what autograd keeps of them: 4 fp32 copies). Time: the
median step (wall, ranks synchronised), as a ratio to ``full`` in the same run.

    python benchmarks/bench_centers.py                              # C = 1M, D = 512, W = 2 and 4
    python benchmarks/bench_centers.py --classes 100000 --worlds 2 4 --batch 32   # fits a small CPU box
    python benchmarks/bench_centers.py --batch 32 --baseline-world 1  # C = 1M on a 23 GB CPU box
    python benchmarks/bench_centers.py --device cuda --worlds 2 4  # one GPU per rank
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heads import PeakMemory, _status_kb  # noqa: E402

from elasticface.classifier.centers import FullFC  # noqa: E402
from elasticface.heads import build_head  # noqa: E402
from elasticface.classifier.dense import margin_softmax_loss  # noqa: E402
from elasticface.classifier.sharded import ShardedFC  # noqa: E402


def _in_use(device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    return (_status_kb("VmRSS") or 0) * 1024


def _run(kind: str, rank: int, world: int, args: argparse.Namespace, device: torch.device) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    head = build_head("arcface")
    g = torch.Generator().manual_seed(rank)
    gc.collect()
    before = _in_use(device)
    if kind == "full":
        layer = FullFC(args.dim, args.classes).to(device)
        model = DistributedDataParallel(layer, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        layer = ShardedFC(args.dim, args.classes)
        layer.shard(rank, world)
        layer = layer.to(device)
        model = layer
    gc.collect()
    resident = _in_use(device) - before  # the layer itself, without the construction transient
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    times = []
    with PeakMemory(device) as peak:
        for _ in range(args.steps):
            emb = torch.randn(args.batch, args.dim, generator=g).to(device).requires_grad_(True)
            labels = torch.randint(0, args.classes, (args.batch,), generator=g).to(device)
            dist.barrier()
            start = time.perf_counter()
            if kind == "full":
                cos, _ = model(emb, labels)
                loss = F.cross_entropy(head(cos, labels), labels)
            else:
                loss = margin_softmax_loss(layer, head, emb, labels).loss
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            dist.barrier()
            times.append(time.perf_counter() - start)
    del model, layer, optimizer
    gc.collect()
    return {"peak": resident + peak.peak, "time": statistics.median(times[1:] or times)}


def _worker(rank: int, world: int, kinds: tuple[str, ...], args: argparse.Namespace, init_file: str,
            out: str) -> None:
    device = torch.device(f"cuda:{rank}") if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(args.threads)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    tiny = argparse.Namespace(**{**vars(args), "classes": 64 * world, "steps": 1})
    for kind in ("full", "sharded"):  # first-use allocations (libraries, gloo, DDP) are not the layer's
        _run(kind, rank, world, tiny, device)
    results = {kind: _run(kind, rank, world, args, device) for kind in kinds}
    torch.save(results, Path(out) / f"{world}_{rank}.pt")
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--classes", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--baseline-world", type=int, default=None, metavar="W",
                   help="measure the full-centre baseline once with W processes (1: DDP over one process) "
                        "instead of beside every world; for machines that cannot hold W full layers")
    args = p.parse_args(argv)
    if min(args.worlds + [1 if args.baseline_world is None else args.baseline_world]) < 1:
        p.error(f"--worlds {args.worlds} and --baseline-world {args.baseline_world}: process counts must be >= 1")
    mib = 2.0**20
    rows = []
    print(f"C={args.classes:,} D={args.dim} B={args.batch} per rank, device={args.device}, {args.steps} steps")
    baseline = None
    if args.baseline_world is not None:
        baseline = _measure(args.baseline_world, ("full",), args)["full"]
        print(f"full centres measured once with {args.baseline_world} process(es): "
              f"{baseline['peak'] / mib:,.0f} MiB per rank, step {baseline['time']:.3f} s")
    print("| world | full: peak MiB / rank | sharded: peak MiB / rank | memory ratio | goal ratio | "
          "full: step s | sharded: step s | step time ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for world in args.worlds:
        res = _measure(world, ("sharded",) if baseline else ("full", "sharded"), args)
        full = baseline or res["full"]
        n = world * args.batch
        goal = full["peak"] / world + (4 * n * args.classes / world + 2 * n * args.dim) * 4
        row = {
            "world": world, "full_mib": full["peak"] / mib, "sharded_mib": res["sharded"]["peak"] / mib,
            "memory_ratio": res["sharded"]["peak"] / full["peak"], "goal_ratio": goal / full["peak"],
            "full_s": full["time"], "sharded_s": res["sharded"]["time"],
            "time_ratio": res["sharded"]["time"] / full["time"],
        }
        rows.append(row)
        print(f"| {world} | {row['full_mib']:,.0f} | {row['sharded_mib']:,.0f} | {row['memory_ratio']:.3f} | "
              f"{row['goal_ratio']:.3f} | {row['full_s']:.3f} | {row['sharded_s']:.3f} | "
              f"{row['time_ratio']:.3f} |", flush=True)
    return rows


def _measure(world: int, kinds: tuple[str, ...], args: argparse.Namespace) -> dict[str, dict]:
    """Run ``kinds`` on ``world`` processes: the worst rank's peak memory and step time of each."""
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, kinds, args, str(Path(tmp) / "init"), tmp), nprocs=world, join=True)
        res = [torch.load(Path(tmp) / f"{world}_{r}.pt", weights_only=False) for r in range(world)]
    return {k: {m: max(r[k][m] for r in res) for m in ("peak", "time")} for k in kinds}


if __name__ == "__main__":
    main()
