"""`python -m elasticface.cli.simd [env [numpy=LEVEL] [torch=LEVEL]]`: the SIMD kernel levels this CPU offers
numpy and torch, or the variables that select one (what `make test-matrix` asks before a cell forces kernels).

`env` prints `NAME=value` assignments for `env(1)` and exits 0, or says on stderr why a level is left out and
exits 3 (a level above the CPU's: torch would die of SIGILL); without arguments it prints the levels offered.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from elasticface.utils.simd import LEVELS, CpuKernels


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cpu = CpuKernels.of_this_process()
    if not args:
        print(f"torch {cpu.torch_capability}, numpy {cpu.numpy_level()}, x86 {cpu.x86}; offered: "
              + ", ".join(f"{lib} {lv}" for lib in ("numpy", "torch") for lv in LEVELS if cpu.offers(lib, lv)))
        return 0
    if args[0] != "env" or not all(a.partition("=")[0] in ("numpy", "torch") for a in args[1:]):
        print("usage: python -m elasticface.cli.simd [env [numpy=LEVEL] [torch=LEVEL]]", file=sys.stderr)
        return 2
    try:
        print(" ".join(f"{k}={v}" for k, v in cpu.env(**dict(a.split("=", 1) for a in args[1:])).items()))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
