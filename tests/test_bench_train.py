"""benchmarks/bench_train.py runs both sides and prints the ratio (a smoke test at a size that takes seconds)."""

import importlib.util
import sys

from conftest import ROOT


def test_bench_train_prints_ratio_and_overhead_against_the_plain_loop(capsys):
    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "benchmarks" / "bench_train.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_train"] = bench
    spec.loader.exec_module(bench)
    rows = bench.main(["--case", "zero", "--steps", "4", "--warmup", "1", "--repeats", "1", "--flops"])
    (row,) = rows
    assert row["plain_ips"] > 0 and row["lightning_ips"] > 0 and row["ratio"] > 0
    # the step's FLOPs, written out: the linear 3*8*8 -> 32 forward and its weight gradient (the images need
    # none), the 16 x 32 centres matmul forward and both its gradients
    b = 64
    expected = 2 * (2 * b * 192 * 32) + 3 * (2 * b * 32 * 16)
    assert abs(row["gflop_per_image"] * b * 1e9 - expected) / expected < 0.05, row["gflop_per_image"]
    assert "ratio (Lightning time / plain time)" in capsys.readouterr().out
