"""The install tells the truth: the Python it claims, the CUDA major of its extras, `--version` on every command,
and one line naming what to install when the environment cannot run what was asked."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
import tomllib

import pytest
import torch
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from elasticface.utils import requirements
from elasticface.utils.requirements import MissingRequirement

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {canonicalize_name(n): v for n, v in (ln.split("==") for ln in lines if "==" in ln and ln[0] != "#")}


def _lowest(spec: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.search(r">=\s*([\d.]+)", spec).group(1).split("."))


def test_requires_python_is_what_every_pin_installs_on():
    """The lowest Python the project claims is accepted by every pinned package that is installed here, and is
    the lowest such Python: claiming less would send users of it into a failing resolve."""
    claimed = _lowest(PROJECT["requires-python"])
    claimed_text = ".".join(map(str, claimed))
    needs = {}
    for name, version in _pins().items():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        spec = dist.metadata.get("Requires-Python")
        if spec:
            assert SpecifierSet(spec).contains(claimed_text + ".0"), \
                f"{name}=={version} needs Python {spec}, but pyproject.toml claims {PROJECT['requires-python']}"
            needs[name] = spec
    one_lower = f"{claimed[0]}.{claimed[1] - 1}.99"
    assert any(not SpecifierSet(s).contains(one_lower) for s in needs.values()), \
        f"no pin needs Python {claimed_text}: requires-python could be lower"
    versions = [c.rsplit(" :: ", 1)[1] for c in PROJECT["classifiers"] if re.search(r"Python :: 3\.\d+$", c)]
    assert versions and all(tuple(map(int, v.split("."))) >= claimed for v in versions), versions
    assert claimed_text in versions


def test_dali_extra_is_built_for_the_pinned_torchs_cuda_major():
    pins = _pins()
    assert torch.__version__.split("+")[0] == pins["torch"], "this test reads the CUDA build of the pinned torch"
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch here: the pinned build's CUDA is not known")
    major = torch.version.cuda.split(".")[0]
    (dali,) = [Requirement(r) for r in PROJECT["optional-dependencies"]["dali"]]
    assert dali.name == f"nvidia-dali-cuda{major}0", f"torch {torch.__version__} is CUDA {major}; dali extra: {dali}"


def _expected_versions() -> list[str]:
    return [f"elasticface {importlib.metadata.version('elasticface')}", f"torch {torch.__version__}",
            f"pytorch-lightning {importlib.metadata.version('pytorch-lightning')}",
            f"Python {sys.version.split()[0]}", f"CUDA {torch.version.cuda or 'CPU-only'}"]


def test_version_on_every_console_script(monkeypatch, capsys):
    """Each command's `--version` names the package, torch, CUDA, Lightning and Python versions (in-process:
    one torch import for all six)."""
    for name, target in PROJECT["scripts"].items():
        module = importlib.import_module(target.split(":")[0])
        monkeypatch.setattr(sys, "argv", [name, "--version"])
        with pytest.raises(SystemExit) as stop:
            module.main()
        out = capsys.readouterr().out
        assert stop.value.code in (0, None), f"{name} --version exited {stop.value.code}"
        assert "Hydra" not in out, f"{name} --version printed Hydra's version: {out}"
        for text in _expected_versions():
            assert text in out, f"{name} --version lacks {text!r}: {out}"


def test_installed_train_command_prints_the_versions_not_hydras():
    """The console script as a user types it (Hydra's own `--version` would print only Hydra's)."""
    command = ROOT / ".venv" / "bin" / "elasticface-train"
    argv = [str(command)] if command.exists() else [sys.executable, "-m", "elasticface.cli.train"]
    out = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"elasticface-train (elasticface {importlib.metadata.version('elasticface')})"
    for text in _expected_versions():
        assert text in out.stdout, out.stdout


def test_python_too_old_names_the_python_to_install():
    with pytest.raises(MissingRequirement, match=r"needs Python >= 3\.11, this is Python 3\.10\.14: install Python"):
        requirements.check_python((3, 10, 14), "3.11")
    requirements.check_python((3, 11, 0), "3.11")
    assert requirements.declared_minimum("python") == ".".join(map(str, _lowest(PROJECT["requires-python"])))


def test_torch_too_old_stops_the_command_in_one_line(monkeypatch, capsys):
    minimum = next(str(Requirement(r).specifier) for r in PROJECT["dependencies"] if Requirement(r).name == "torch")
    monkeypatch.setattr(requirements, "installed_version", lambda dist: "2.1.0" if dist == "torch" else "9")
    monkeypatch.setattr(sys, "argv", ["elasticface-train", "debug=tiny"])
    from elasticface.cli.train import main

    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"needs torch{minimum}, found torch 2.1.0: pip install 'torch{minimum}'" in err


def test_torch_without_the_cuda_the_config_asks_for():
    with pytest.raises(MissingRequirement, match=r"trainer.accelerator=gpu .* torch 2.14.1\+cpu is a CPU-only build: "
                                                 r"install the CUDA build .*pip install torch==2.14.1 --index-url "
                                                 r"https://download.pytorch.org/whl/cu130"):
        requirements.check_accelerator("trainer.accelerator", "gpu", "2.14.1+cpu", None, False)
    with pytest.raises(MissingRequirement, match=r"device=cuda:1 .* \(built for CUDA 13.0\) sees none"):
        requirements.check_accelerator("device", "cuda:1", "2.14.1+cu130", "13.0", False)
    for ok in (("cpu", None, False), ("auto", None, False), ("gpu", "13.0", True)):
        requirements.check_accelerator("trainer.accelerator", ok[0], "2.14.1", ok[1], ok[2])


def test_training_on_gpu_without_cuda_is_refused_before_the_trainer(tiny_cfg, monkeypatch):
    from elasticface.training import build_trainer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MissingRequirement, match="trainer.accelerator=gpu asks for a CUDA GPU"):
        build_trainer(tiny_cfg("trainer=gpu"))


@pytest.mark.parametrize("override, package", [
    ("launcher=slurm", "hydra-submitit-launcher"), ("launcher=joblib", "hydra-joblib-launcher"),
    ("hparams_search=elastic_optuna", "optuna"), ("hydra/launcher=submitit_slurm", "hydra-submitit-launcher")])
def test_a_cluster_option_without_its_plugin_names_the_extra(override, package, monkeypatch, capsys):
    module = {"hydra-submitit-launcher": "hydra_plugins.hydra_submitit_launcher",
              "hydra-joblib-launcher": "hydra_plugins.hydra_joblib_launcher", "optuna": "optuna"}[package]
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    monkeypatch.setattr(sys, "argv", ["elasticface-train", "-m", override])
    from elasticface.cli.train import main

    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"elasticface-train: error: {override} needs {package}, which is not installed: "
                   f"pip install 'elasticface[cluster]' (or pip install {package})")


def test_onnx_without_the_export_extra_names_it(monkeypatch, tmp_path):
    from elasticface.eval.embed import OnnxEmbedder
    from elasticface.export import export_onnx

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingRequirement, match=r"needs onnxruntime, which is not installed: pip install "
                                                 r"'elasticface\[export\]'"):
        export_onnx(torch.nn.Flatten(), str(tmp_path / "m.onnx"))
    assert not (tmp_path / "m.onnx").exists()
    with pytest.raises(MissingRequirement, match=r"the ONNX model .*m.onnx needs onnxruntime.*elasticface\[export\]"):
        OnnxEmbedder(str(tmp_path / "m.onnx"))


def test_dali_without_the_extra_names_it(monkeypatch):
    from elasticface.data import dali

    (package,) = [Requirement(r).name for r in PROJECT["optional-dependencies"]["dali"]]
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    with pytest.raises(MissingRequirement, match=rf"data.decoder=dali needs {package}, which is not "
                                                 r"installed: pip install 'elasticface\[dali\]'"):
        dali.require_dali()
