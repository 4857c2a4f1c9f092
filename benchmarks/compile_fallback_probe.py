"""Does this torch run a compiled module eagerly, for good, once it was called under a TorchDispatchMode?

torch 2.11 does (pytorch/pytorch#190286): after one call of a compiled module under FlopCounterMode (which the
GPU suite's FLOP count makes, and Lightning's model summary with an example input), dynamo skips that frame in
every later call, with no message, and the run trains eagerly. This probe counts the calls into the compiled graph
(elasticface.utils.speed.CompiledCalls, dynamo's `eager` backend: seconds on a CPU) around such a call and prints
one line; exit code 1 where the fallback happens. docs/compile.md lists the versions seen.

    python benchmarks/compile_fallback_probe.py
"""

from __future__ import annotations

import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from elasticface.utils.speed import compile_in_place


def main() -> int:
    calls = []
    for _ in range(2):  # a second module of the same class: the skip is per code object, not per instance
        module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        counter = compile_in_place(module, "eager")
        x = torch.randn(4, 8)
        module(x)
        with FlopCounterMode(display=False):
            module(x)
        module(x)
        calls.append(counter.calls)
    fallback = calls != [2, 2]  # the first and the last call of each module ran the graph
    print(f"torch {torch.__version__}: calls into the compiled graph {calls} (expected [2, 2]): "
          + ("FALLS BACK to eager after a call under a TorchDispatchMode" if fallback else "stays compiled"))
    return 1 if fallback else 0


if __name__ == "__main__":
    sys.exit(main())
