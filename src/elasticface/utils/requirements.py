"""What a run needs from its environment, checked before it starts: one line naming what to install.

The minimum versions have one home, pyproject.toml (`requires-python`, the `torch` range), read back from the
installed package's metadata; a checkout run without `pip install -e .` has no metadata and skips those two.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys

from elasticface.utils.errors import UserError

#: the install documentation users are pointed to (docs/install.md in the repository)
INSTALL_DOC = "docs/install.md"
#: the PyTorch wheel index of each CUDA build (https://download.pytorch.org/whl/<tag>)
TORCH_INDEX = "https://download.pytorch.org/whl/"


class MissingRequirement(UserError, RuntimeError):
    """The environment lacks what the chosen run needs; the message says what to install."""


def _version_tuple(version: str) -> tuple[int, ...]:
    """(2, 14, 1) for '2.14.1+cu130' or '2.14.1rc1': the leading numeric release."""
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0].split("rc")[0])[:3])


def declared_minimum(name: str) -> str | None:
    """The lowest version this package's metadata accepts for `name` ('python' or a dependency), or None
    (not installed as a distribution, or no lower bound)."""
    try:
        meta = importlib.metadata.metadata("elasticface")
    except importlib.metadata.PackageNotFoundError:
        return None
    if name == "python":
        specs = [meta.get("Requires-Python") or ""]
    else:
        specs = [r for r in meta.get_all("Requires-Dist") or [] if ";" not in r
                 and re.split(r"[\s<>=!~\[(]", r, maxsplit=1)[0].lower() == name]
    for spec in specs:
        found = re.search(r">=\s*([0-9][0-9.]*)", spec)
        if found:
            return found.group(1)
    return None


def check_python(version_info: tuple[int, ...] = tuple(sys.version_info[:3]), minimum: str | None = None) -> None:
    minimum = minimum or declared_minimum("python")
    if minimum and tuple(version_info[:3]) < _version_tuple(minimum):
        have = ".".join(str(v) for v in version_info[:3])
        raise MissingRequirement(f"elasticface needs Python >= {minimum}, this is Python {have}: install Python "
                                 f"{minimum} or newer (e.g. conda create -n elasticface python={minimum}) "
                                 f"and reinstall there ({INSTALL_DOC})")


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, read without importing it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_torch(version: str | None = None, minimum: str | None = None) -> None:
    version = version or installed_version("torch")
    minimum = minimum or declared_minimum("torch")
    if version is None:
        raise MissingRequirement(f"torch is not installed: install the build for your CUDA driver first "
                                 f"(pip install torch --index-url {TORCH_INDEX}cu130, or .../cpu; {INSTALL_DOC})")
    if minimum and _version_tuple(version) < _version_tuple(minimum):
        raise MissingRequirement(f"elasticface needs torch>={minimum}, found torch {version}: pip install "
                                 f"'torch>={minimum}' --index-url {TORCH_INDEX}<cu130|cu128|cpu> ({INSTALL_DOC})")


def check_environment() -> None:
    """Python and torch new enough for this package (what every command checks first)."""
    check_python()
    check_torch()


def check_accelerator(setting: str, value: object, torch_version: str, cuda_build: str | None,
                      cuda_available: bool) -> None:
    """`setting=value` (`trainer.accelerator=gpu`, eval's `device=cuda`) asking for CUDA needs a CUDA build of
    torch that sees a GPU."""
    if str(value).lower().split(":")[0] not in ("gpu", "cuda") or cuda_available:
        return
    asked = f"{setting}={value}"
    if cuda_build is None:
        raise MissingRequirement(
            f"{asked} asks for a CUDA GPU, but torch {torch_version} is a CPU-only build: install the CUDA build "
            f"for your driver, e.g. pip install torch=={torch_version.split('+')[0]} --index-url {TORCH_INDEX}cu130 "
            f"(`nvidia-smi` shows the newest CUDA the driver runs; {INSTALL_DOC})")
    raise MissingRequirement(
        f"{asked} asks for a CUDA GPU, but torch {torch_version} (built for CUDA {cuda_build}) sees none: no GPU "
        f"visible (`nvidia-smi`, CUDA_VISIBLE_DEVICES) or a driver older than CUDA {cuda_build}; install the torch "
        f"build for your driver's CUDA ({INSTALL_DOC}) or run on the CPU (trainer=cpu, device=cpu)")


def check_cuda_request(setting: str, value: object) -> None:
    """`check_accelerator` against the torch of this process."""
    import torch

    check_accelerator(setting, value, torch.__version__, torch.version.cuda, torch.cuda.is_available())


def require_module(module: str, feature: str, extra: str, package: str) -> None:
    """Fail naming the extra to install when `module` (for `feature`) cannot be found."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing
        found = False
    if not found:
        raise MissingRequirement(f"{feature} needs {package}, which is not installed: "
                                 f"pip install 'elasticface[{extra}]' (or pip install {package})")
