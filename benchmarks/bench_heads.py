"""Forward + backward cost of every margin head, as ratios to ArcFace measured in the same run.

One step = ``head(cos, labels[, norms])`` -> cross-entropy (+ aux loss) -> backward to ``cos``, at
B = 512, C = 85,742 (MS1MV2's identities) by default. ``cos`` is a leaf input, so the numbers
isolate the head and the loss; ``--with-fc`` also runs the normalised ``[B, D] x [D, C]`` centres
matmul (D = 512) in each step, which every head shares.

Time: per step, heads interleaved round-robin so that drift hits all of them alike; the ratio of
the fastest steps (the verdict, as ``timeit`` advises: the work is deterministic and other jobs
only ever add time) and of the median steps are printed. On a shared CPU the median moves by about
±5% between runs (NormFace, which does strictly less work than ArcFace, has measured 1.03).
``--clock cpu`` (the default on CPU) counts the process's CPU time (all threads, user + system,
page faults included) instead of wall time, which other jobs on a shared machine disturb far less;
``--clock wall`` (the default on CUDA, with synchronisation) is the elapsed time.

Peak memory: the extra bytes a step needs on top of its inputs.
- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the allocated
  bytes before the step.
- CPU: the process's peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) minus
  the resident set before the step. Tensors of this size are mmap-ed by glibc and returned on free,
  so this tracks live tensor bytes (to within the page granularity and small-allocation caching);
  where ``/proc`` is unavailable memory is reported as n/a.

    python benchmarks/bench_heads.py                      # CPU, full size (a few minutes on 2 cores)
    python benchmarks/bench_heads.py --classes 10000      # quick
    python benchmarks/bench_heads.py --device cuda --with-fc
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from elasticface.heads import build_head, head_names

#: every head option that is not a sub-centre wrapper
BASE_HEADS = [n for n in head_names() if not n.startswith("subcenter_")]

ELASTIC = ("elastic_arc", "elastic_cos", "elastic_arc_plus", "elastic_cos_plus")


def _status_kb(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakMemory:
    """Extra peak bytes of a block of work on ``device`` (see the module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak: int | None = None

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        else:
            try:
                Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
                self._base = _status_kb("VmRSS")
            except OSError:
                self._base = None
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self._base
        elif self._base is not None:
            hwm = _status_kb("VmHWM")
            self.peak = None if hwm is None else (hwm - self._base) * 1024


def make_inputs(B: int, C: int, D: int, device: torch.device, with_fc: bool, seed: int = 0):
    """Realistic cosines: negatives around 0, targets in [0.1, 0.9]; or embeddings and centres."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, C, (B,), generator=g)
    norms = torch.rand(B, generator=g) * 60 + 10
    if with_fc:
        emb = torch.randn(B, D, generator=g)
        W = torch.randn(C, D, generator=g) * 0.01
        W[labels] += emb * 0.05  # targets closer than negatives
        return (emb.to(device), W.to(device)), labels.to(device), norms.to(device)
    cos = (torch.randn(B, C, generator=g) * 0.1).clamp_(-1, 1)
    cos[torch.arange(B), labels] = torch.rand(B, generator=g) * 0.8 + 0.1
    return cos.to(device), labels.to(device), norms.to(device)


def step(head, inputs, labels: torch.Tensor, norms: torch.Tensor, with_fc: bool, k: int) -> None:
    if with_fc:
        emb, W = inputs
        emb = emb.detach().requires_grad_()
        W = W.detach().requires_grad_()
        Wk = W.repeat_interleave(k, 0) if k > 1 else W
        cos = F.linear(F.normalize(emb), F.normalize(Wk)) if head.normalized else F.linear(emb, Wk)
    else:
        cos = inputs.detach().requires_grad_()
        if k > 1:
            cos = cos.repeat_interleave(k, 1)
    logits, plan = head.logits(cos, labels, norms if head.needs_norms else None)
    loss = F.cross_entropy(logits, labels)
    if plan.aux_loss is not None:
        loss = loss + plan.aux_loss
    loss.backward()


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--classes", type=int, default=85_742)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--heads", nargs="*", default=None, help="names (default: all; arcface is always run)")
    p.add_argument("--with-fc", action="store_true", help="include the centres matmul in every step")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clock", choices=["cpu", "wall"], default=None, help="default: cpu on CPU, wall on CUDA")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    names = a.heads or BASE_HEADS + ["subcenter_arcface"]
    names = ["arcface"] + [n for n in names if n != "arcface"]
    heads = {n: build_head(n, **({"seed": 0} if "elastic" in n else {})).to(device).train() for n in names}
    inputs, labels, norms = make_inputs(a.batch, a.classes, a.dim, device, a.with_fc)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock_name = a.clock or ("wall" if device.type == "cuda" else "cpu")
    clock = time.perf_counter if clock_name == "wall" else time.process_time

    def run(n: str) -> float:
        h = heads[n]
        sync()
        t0 = clock()
        step(h, inputs, labels, norms, a.with_fc, h.centers_per_class)
        sync()
        return clock() - t0

    for n in names:
        for _ in range(a.warmup):
            run(n)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(a.repeats):
        for n in names:
            times[n].append(run(n))
    mem: dict[str, int | None] = {}
    for n in names:
        with PeakMemory(device) as pm:
            step(heads[n], inputs, labels, norms, a.with_fc, heads[n].centers_per_class)
        mem[n] = pm.peak

    base_t = min(times["arcface"])
    base_med = statistics.median(times["arcface"])
    base_m = mem["arcface"]
    mem_kind = "cuda max_memory_allocated" if device.type == "cuda" else "peak RSS (VmHWM) increase"
    print(
        f"B={a.batch} C={a.classes} D={a.dim} device={device} threads={torch.get_num_threads()} "
        f"with_fc={a.with_fc} repeats={a.repeats} clock={clock_name}; memory = {mem_kind} during one step"
    )
    print(f"{'head':<22}{'time ratio':>11}{'(median)':>10}{'mem ratio':>11}   (arcface: best {base_t * 1e3:.0f} ms, "
          f"median {base_med * 1e3:.0f} ms, {(base_m or 0) / 2**20:.0f} MiB)")
    rows = []
    for n in names:
        t = min(times[n]) / base_t
        t_med = statistics.median(times[n]) / base_med
        m = mem[n] / base_m if (mem[n] is not None and base_m) else float("nan")
        flag = ""
        if n in ELASTIC and (t > 1.05 or m > 1.05):
            flag = "  > 5% over arcface"
        print(f"{n:<22}{t:>11.3f}{t_med:>10.3f}{m:>11.3f}{flag}")
        rows.append({"head": n, "time_ratio": t_med, "time_ratio_best": t, "mem_ratio": m})
    return rows


if __name__ == "__main__":
    main()
