"""Peak memory and step time of the class layer: chunked vs dense vs the released ElasticFace code.

One step = class centres -> margin head -> cross-entropy, forward + backward, then an SGD momentum
step on the centres (the embeddings are a leaf input, so this isolates the class layer). Three
implementations, interleaved round-robin within one process:

- ``released``: the released ElasticFace code's ElasticArcFace(plus=True) with ``nn.CrossEntropyLoss``,
  re-expressed here from its published behaviour (kernel ``[D, C]``, cosines clamped, ``acos``/``cos``
  over the whole ``[B, C]`` matrix, a dense ``[B, C]`` one-hot of the margins, "+" by gathering the
  sorted margins with the sort permutation). A benchmark-only baseline: not used anywhere else.
- ``dense``: this project's dense path (cosines ``[B, C]`` -> head logits -> cross-entropy).
- ``chunked``: this project's default, the margin cross-entropy over class chunks (``--chunks`` sizes).

Memory (``extra``): the peak bytes a step needs on top of the state at rest (centres, momentum, the
batch); CUDA: ``max_memory_allocated``; CPU: the peak resident set (VmHWM, reset through
``/proc/self/clear_refs``; glibc's mmap threshold is pinned at 128 KiB so freed tensors leave the
resident set). ``total/[C,D]`` adds the centres and their momentum and divides by one fp32 ``[C, D]``.
Time: the process's CPU time per step on CPU (``--clock cpu``, robust on a shared machine), wall time
with synchronisation on CUDA; the ratio of medians and of the fastest steps to the dense path.

    python benchmarks/bench_classifier.py                                   # B 512, D 512, C 85,742
    python benchmarks/bench_classifier.py --chunks 2048 4096 8192 16384     # choose the chunk size
    python benchmarks/bench_classifier.py --classes 1000000 --batch 256 --paths chunked
    python benchmarks/bench_classifier.py --heads adacos                    # a head with a second pass
    python benchmarks/bench_classifier.py --device cuda
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heads import PeakMemory  # noqa: E402

from elasticface.classifier import DEFAULT_CHUNK_SIZE, Classifier, FullFC  # noqa: E402
from elasticface.heads import build_head  # noqa: E402


class ReleasedElasticArcPlus(nn.Module):
    """The released ElasticArcFace(plus=True) + cross-entropy, as it behaves (benchmark baseline only)."""

    def __init__(self, dim: int, num_classes: int, s: float = 64.0, m: float = 0.5, std: float = 0.0175) -> None:
        super().__init__()
        self.s, self.m, self.std = s, m, std
        self.kernel = nn.Parameter(torch.randn(dim, num_classes) * 0.01)

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        x = embeddings / embeddings.norm(dim=1, keepdim=True)
        w = self.kernel / self.kernel.norm(dim=0, keepdim=True)
        cos = torch.mm(x, w).clamp(-1, 1)
        rows = torch.where(labels != -1)[0]
        one_hot = torch.zeros(rows.numel(), cos.shape[1], device=cos.device)
        margins = torch.normal(self.m, self.std, (rows.numel(), 1), device=cos.device)
        with torch.no_grad():
            order = torch.sort(cos[rows, labels[rows]], dim=0, descending=True).indices
            margins = torch.sort(margins, dim=0).values
        one_hot.scatter_(1, labels[rows, None], margins[order])
        cos.acos_()
        cos[rows] += one_hot
        logits = cos.cos_().mul_(self.s)
        return F.cross_entropy(logits, labels)


def _pin_mmap_threshold() -> None:
    """Keep glibc from raising its mmap threshold, so freed [B, C] blocks leave the resident set."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def build(path: str, head_name: str, args: argparse.Namespace, chunk: int | None, weight: Tensor, device):
    if path == "released":
        model = ReleasedElasticArcPlus(args.dim, args.classes).to(device)
        with torch.no_grad():
            model.kernel.copy_(weight.T)
        loss_fn = model
    else:
        head = build_head(head_name, **({"seed": 0} if "elastic" in head_name else {})).train()
        layer = FullFC(args.dim, args.classes, centers_per_class=head.centers_per_class).to(device)
        with torch.no_grad():
            layer.weight.copy_(weight.repeat_interleave(head.centers_per_class, 0))
        model = Classifier(layer, head.to(device), chunk_size=chunk, path=path)

        def loss_fn(e: Tensor, y: Tensor) -> Tensor:
            return model(e, y).loss

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return loss_fn, optimizer


def step(loss_fn, optimizer, emb: Tensor, labels: Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss_fn(emb.detach().requires_grad_(), labels).backward()
    optimizer.step()


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--classes", type=int, default=85_742)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", nargs="*", default=["elastic_arc_plus"])
    p.add_argument(
        "--paths", nargs="*", default=["released", "dense", "chunked"], choices=["released", "dense", "chunked"]
    )
    p.add_argument(
        "--chunks", nargs="*", type=int, default=[DEFAULT_CHUNK_SIZE], help="chunk sizes of the chunked path"
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clock", choices=["cpu", "wall"], default=None, help="default: cpu on CPU, wall on CUDA")
    a = p.parse_args(argv)
    for c in a.chunks:
        if not 1 <= c <= a.classes:
            raise SystemExit(f"--chunks {c}: a chunk size must be in [1, --classes={a.classes}]")
    if a.threads:
        torch.set_num_threads(a.threads)
    _pin_mmap_threshold()
    device = torch.device(a.device)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, a.classes, (a.batch,), generator=g)
    emb = torch.randn(a.batch, a.dim, generator=g)
    weight = torch.randn(a.classes, a.dim, generator=g) * 0.01
    weight[labels] += emb * 0.05  # targets closer than negatives
    emb, labels = emb.to(device), labels.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock_name = a.clock or ("wall" if device.type == "cuda" else "cpu")
    clock = time.perf_counter if clock_name == "wall" else time.process_time

    variants: list[tuple[str, str, int | None]] = []
    for head in a.heads:
        for path in a.paths:
            if path == "released":
                if head == "elastic_arc_plus":
                    variants.append((head, path, None))
            elif path == "chunked":
                variants += [(head, path, c) for c in a.chunks]
            else:
                variants.append((head, path, None))
    cd_bytes = a.classes * a.dim * 4

    # memory: one variant alive at a time (its centres, momentum after a warm-up step, then one measured step)
    mem: dict[tuple, int | None] = {}
    for v in variants:
        gc.collect()
        loss_fn, opt = build(v[1], v[0], a, v[2], weight.to(device), device)
        step(loss_fn, opt, emb, labels)
        opt.zero_grad(set_to_none=True)
        with PeakMemory(device) as pm:
            step(loss_fn, opt, emb, labels)
        mem[v] = pm.peak
        del loss_fn, opt

    # time: all variants alive together only if they fit; interleaved round-robin
    times: dict[tuple, list[float]] = {v: [] for v in variants}
    if a.repeats > 0:
        built = {v: build(v[1], v[0], a, v[2], weight.to(device), device) for v in variants}
        for _ in range(a.warmup):
            for v in variants:
                step(*built[v], emb, labels)
        for _ in range(a.repeats):
            for v in variants:
                sync()
                t0 = clock()
                step(*built[v], emb, labels)
                sync()
                times[v].append(clock() - t0)
        del built

    mem_kind = "cuda max_memory_allocated" if device.type == "cuda" else "peak RSS (VmHWM) increase"
    print(
        f"B={a.batch} C={a.classes} D={a.dim} device={device} threads={torch.get_num_threads()} "
        f"repeats={a.repeats} clock={clock_name}; memory = {mem_kind} during one step (fwd + bwd + SGD momentum)"
    )
    print(
        f"{'head':<18}{'path':<9}{'chunk':>7}{'extra MiB':>11}{'total/[C,D]':>13}{'vs dense':>10}{'vs released':>13}"
        f"{'time vs dense':>15}{'(best)':>8}{'median s':>10}"
    )
    rows = []
    for head in a.heads:
        dense_v = (head, "dense", None)
        released_v = ("elastic_arc_plus", "released", None) if "released" in a.paths else None
        for v in [x for x in variants if x[0] == head]:
            m = mem[v]
            m_dense = mem.get(dense_v)
            m_rel = mem.get(released_v) if released_v else None
            med = statistics.median(times[v]) if times[v] else float("nan")
            t_ratio = med / statistics.median(times[dense_v]) if times[v] and times.get(dense_v) else float("nan")
            t_best = min(times[v]) / min(times[dense_v]) if times[v] and times.get(dense_v) else float("nan")
            total = (m + 2 * cd_bytes) / cd_bytes if m is not None else float("nan")
            r_dense = m / m_dense if m is not None and m_dense else float("nan")
            r_rel = m / m_rel if m is not None and m_rel else float("nan")
            print(
                f"{v[0]:<18}{v[1]:<9}{v[2] or '-':>7}{(m or 0) / 2**20:>11.0f}{total:>13.2f}{r_dense:>10.3f}"
                f"{r_rel:>13.3f}{t_ratio:>15.3f}{t_best:>8.3f}{med:>10.3f}"
            )
            rows.append(
                {
                    "head": v[0],
                    "path": v[1],
                    "chunk": v[2],
                    "extra_bytes": m,
                    "total_cd": total,
                    "mem_vs_dense": r_dense,
                    "mem_vs_released": r_rel,
                    "time_vs_dense": t_ratio,
                    "time_vs_dense_best": t_best,
                    "median_s": med,
                }
            )
    if "adacos" in a.heads:
        print("adacos (dynamic): its chunked step includes one extra no-grad pass over the classes for its scale")
    return rows


if __name__ == "__main__":
    main()
