"""Which SIMD kernels numpy and torch can be told to use on this CPU, and the environment that does it.

Forcing a kernel the CPU lacks is no emulation: torch obeys `ATEN_CPU_CAPABILITY` unchecked and dies of SIGILL,
numpy refuses to start. So every test and make target that forces a choice asks here first, and a choice above
what the process may use is left out and named. "What the process may use" is read from the running process,
so a parent that already restricts the kernels (`ATEN_CPU_CAPABILITY=avx2`, `NPY_ENABLE_CPU_FEATURES=...`)
is an AVX2-only CPU to everything below it: that is how `make test` is run as on an AVX2-only machine.

`python -m elasticface.cli.simd env numpy=avx2 torch=avx2` asks the same from a shell (make test-matrix).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LEVELS = ("baseline", "avx2", "avx512")  # x86-64 kernel levels, lowest first; torch calls "baseline" "default"
TORCH_NAMES = {"baseline": "default", "avx2": "avx2", "avx512": "avx512"}  # ATEN_CPU_CAPABILITY's values
KERNEL_VARIABLES = ("NPY_ENABLE_CPU_FEATURES", "NPY_DISABLE_CPU_FEATURES", "ATEN_CPU_CAPABILITY")
# numpy 2.4 groups its x86 dispatch targets by microarchitecture level (X86_V3 = AVX2, X86_V4 = AVX-512);
# numpy before 2.4 names single features. Old names under numpy 2.4 silently leave only the baseline kernels.
_NUMPY_LEVEL_FEATURES = {
    "grouped": {"avx2": ("X86_V3",), "avx512": ("X86_V4",)},
    "single": {
        "avx2": ("SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "FMA3", "AVX2"),
        "avx512": ("AVX512F", "AVX512CD", "AVX512_SKX"),
    },
}


@dataclass(frozen=True)
class CpuKernels:
    """What a process may use: torch's capability and numpy's CPU feature table (as numpy reports them)."""

    torch_capability: str  # torch.backends.cpu.get_cpu_capability(): "DEFAULT", "AVX2", "AVX512", "SVE256", ...
    numpy_features: Mapping[str, bool]  # numpy's __cpu_features__
    numpy_baseline: Sequence[str]  # numpy's __cpu_baseline__
    x86: bool

    @classmethod
    def of_this_process(cls) -> CpuKernels:
        import torch
        from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_features__

        return cls(torch.backends.cpu.get_cpu_capability(), dict(__cpu_features__), list(__cpu_baseline__),
                   platform.machine().lower() in ("x86_64", "amd64"))

    def _numpy_scheme(self) -> str:
        return "grouped" if "X86_V3" in self.numpy_features else "single"

    def numpy_level(self) -> str:
        """The highest x86 level numpy dispatches to here (its transcendental kernels change with it)."""
        levels = _NUMPY_LEVEL_FEATURES[self._numpy_scheme()]
        for level in ("avx512", "avx2"):
            if all(self.numpy_features.get(f) for f in levels[level]):
                return level
        return "baseline"

    def torch_level(self) -> str:
        return {"DEFAULT": "baseline", "AVX2": "avx2", "AVX512": "avx512"}.get(self.torch_capability, "native")

    def offers(self, library: str, level: str) -> bool:
        own = self.numpy_level() if library == "numpy" else self.torch_level()
        if level == "baseline":
            return True
        return self.x86 and own in LEVELS and LEVELS.index(level) <= LEVELS.index(own)

    def numpy_enable(self, level: str) -> str:
        """NPY_ENABLE_CPU_FEATURES for a level: the baseline plus that level's dispatch targets."""
        levels = _NUMPY_LEVEL_FEATURES[self._numpy_scheme()]
        extra = [f for lv in LEVELS[1 : LEVELS.index(level) + 1] for f in levels[lv]]
        return ",".join(dict.fromkeys([*self.numpy_baseline, *extra]))

    def env(self, numpy: str | None = None, torch: str | None = None) -> dict[str, str]:
        """The variables that make a child process use these levels; ValueError names a level not offered."""
        out: dict[str, str] = {}
        for library, level in (("numpy", numpy), ("torch", torch)):
            if level is None:
                continue
            if level not in LEVELS:
                raise ValueError(f"{library}={level}: expected one of {list(LEVELS)}")
            if not self.offers(library, level):
                own = self.numpy_level() if library == "numpy" else self.torch_capability
                raise ValueError(f"{library} {level} kernels left out: this CPU (as this process sees it) offers "
                                 f"{library} up to {own}")
        if numpy is not None:
            out["NPY_ENABLE_CPU_FEATURES"] = self.numpy_enable(numpy)
        if torch is not None:
            out["ATEN_CPU_CAPABILITY"] = TORCH_NAMES[torch]
        return out


def child_env(choice: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (os.environ) with a choice applied: a numpy choice replaces both NPY_ variables (numpy takes one)."""
    env = dict(os.environ if base is None else base)
    if "NPY_ENABLE_CPU_FEATURES" in choice:
        env.pop("NPY_DISABLE_CPU_FEATURES", None)
    env.update(choice)
    return env
