"""Packaging: the wheel carries the config tree and the commands; pins, ranges, licence and the entry points agree.

The wheel is built from a copy of the checkout (nothing written into the repository) with the venv's
setuptools, offline (`--no-index --no-build-isolation`), and installed with `pip --target`: the
`elasticface-*` commands then run from a temporary directory with only that install on PYTHONPATH.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
SCRIPTS = PROJECT["scripts"]
# The extras pinned in constraints.txt: what `make install` and environment.yaml install, and `make docs`
# (dali needs CUDA and is not pinned).
PINNED_EXTRAS = ("test", "export", "cluster", "docs")


def _config_files() -> list[str]:
    """Every config of the tree, relative to configs/, except the git-ignored per-machine `local/`."""
    return sorted(
        p.relative_to(ROOT / "configs").as_posix()
        for p in (ROOT / "configs").rglob("*.yaml")
        if p.relative_to(ROOT / "configs").parts[0] != "local"
    )


def _run(cmd: list[str], cwd: Path, pythonpath: Path | None, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(WANDB_MODE="offline", WANDB_SILENT="true")
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout that also holds a per-machine configs/local/ (must stay out)."""
    src = tmp_path_factory.mktemp("checkout")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "local")
    shutil.copytree(ROOT / "src", src / "src", ignore=ignore)
    shutil.copytree(ROOT / "configs", src / "configs", ignore=ignore)
    (src / "configs" / "local").mkdir()
    (src / "configs" / "local" / "default.yaml").write_text("data:\n  root: /private/data\n")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
          "--disable-pip-version-check", "--quiet", "-w", str(out), str(src)], cwd=src, pythonpath=None)
    (built,) = out.glob("elasticface-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed (no dependencies: the venv has them) into a folder of its own, scripts in bin/."""
    target = tmp_path_factory.mktemp("site")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
          "--quiet", "--target", str(target), str(wheel)], cwd=target, pythonpath=None)
    return target


def test_wheel_ships_every_config_module_script_and_the_licence(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing_configs = [c for c in _config_files() if f"elasticface/configs/{c}" not in names]
    assert not missing_configs, f"configs missing from the wheel: {missing_configs}"
    assert not [n for n in names if n.startswith("elasticface/configs/local/")], "per-machine configs/local/ shipped"
    modules = sorted(p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "elasticface").rglob("*.py"))
    assert not [m for m in modules if m not in names], "modules missing from the wheel"

    dist_info = "elasticface-" + PROJECT["version"] + ".dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata.splitlines()
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    for name in ("elasticface-train", "elasticface-eval", "elasticface-embed", "elasticface-export",
                 "elasticface-convert", "elasticface-report"):
        assert f"{name} = " in entry_points, f"console script {name} missing"


def test_installed_commands_compose_from_the_packaged_configs(installed, tmp_path):
    packaged = installed / "elasticface" / "configs"
    for script in ("elasticface-train", "elasticface-eval"):
        out = _run([sys.executable, str(installed / "bin" / script), "--info", "searchpath"], tmp_path, installed)
        assert f"file://{packaged}" in out.stdout, out.stdout
        assert f"file://{ROOT}" not in out.stdout
    job = _run([sys.executable, str(installed / "bin" / "elasticface-train"), "--cfg", "job", "--resolve", "debug=tiny",
                "head=elastic_arc_plus"], tmp_path, installed)
    cfg = yaml.safe_load(job.stdout)
    assert cfg["model"]["head"]["_target_"].startswith("elasticface.heads.")
    assert (cfg["sigma"], cfg["paths"]["log_dir"]) == (0.0175, str(tmp_path / "logs"))


def test_train_py_and_eval_py_find_the_checkout_configs_from_any_directory(tmp_path):
    for script in ("train.py", "eval.py"):
        out = _run([sys.executable, str(ROOT / script), "--info", "searchpath"], tmp_path, None)
        assert f"file://{ROOT / 'configs'} " in out.stdout, out.stdout


def test_config_dir_is_the_packaged_tree_else_the_checkout_one(tmp_path):
    from elasticface.utils.config import config_dir

    assert config_dir() == ROOT / "configs"  # this checkout: src/elasticface has no configs/ of its own
    site = tmp_path / "site-packages" / "elasticface"
    with pytest.raises(FileNotFoundError, match=re.escape(str(site / "configs"))):
        config_dir(site)
    (site / "configs").mkdir(parents=True)
    (site / "configs" / "train.yaml").write_text("{}\n")
    assert config_dir(site) == site / "configs"


def test_every_package_under_src_is_listed_in_pyproject():
    """pyproject lists its packages (so that configs/ can map in): a new subpackage must be added there."""
    found = {
        ".".join(p.parent.relative_to(ROOT / "src").parts)
        for p in (ROOT / "src").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert not found - listed, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(found - listed)}"
    absent = sorted(listed - found - {"elasticface.configs"})
    assert listed - found == {"elasticface.configs"}, f"listed but absent from src/: {absent}"
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["elasticface.configs"] == "configs"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_script_targets_are_callables(name):
    module, _, attr = SCRIPTS[name].partition(":")
    assert callable(getattr(importlib.import_module(module), attr)), SCRIPTS[name]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not an exact pin name==version"
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_pin_every_declared_dependency_inside_its_range():
    pins = _constraints()
    declared = list(PROJECT["dependencies"])
    for extra in PINNED_EXTRAS:
        declared += PROJECT["optional-dependencies"][extra]
    for spec in map(Requirement, declared):
        name = canonicalize_name(spec.name)
        assert name in pins, f"constraints.txt has no pin for {spec.name} (pyproject.toml: {spec})"
        assert spec.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {spec.name}=={pins[name]}, outside pyproject.toml's range {spec}"
        )
    assert (pins["torch"], pins["torchvision"]) == ("2.14.1", "0.29.1")  # the pair DESIGN.md prescribes
    pinned = [r for r in PROJECT["dependencies"] if "==" in r]
    assert not pinned, "pyproject.toml states ranges; pins go to constraints.txt"


def test_makefile_and_environment_install_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install .*-c \$\(ROOT\)constraints\.txt -e \"\$\(ROOT\)\[test\]\"", makefile), \
        "Makefile install ignores constraints.txt"
    assert re.search(r"^\$\(STAMP\):.*constraints\.txt", makefile, re.M), "a changed constraints.txt must reinstall"
    env = yaml.safe_load((ROOT / "environment.yaml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip_section == ["-c constraints.txt", '-e ".[test]"']
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert f"Programming Language :: Python :: {python.split('=')[1]}" in PROJECT["classifiers"]


def test_license_is_an_spdx_expression_with_its_file():
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the ElasticFace template authors" in text
    # PEP 639: a licence expression replaces the "License ::" classifiers (setuptools refuses both)
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    build_requires = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    setuptools_req = next(r for r in build_requires if r.name == "setuptools")
    assert not setuptools_req.specifier.contains("76.9"), "SPDX `license` strings need setuptools>=77"


@pytest.mark.slow
def test_installed_wheel_trains_from_any_directory(installed, tmp_path):
    """`elasticface-train debug=tiny` from a directory that is not the checkout, with only the wheel on the path."""
    _run([sys.executable, str(installed / "bin" / "elasticface-train"), "debug=tiny"], tmp_path, installed, timeout=600)
    (run_dir,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    assert (run_dir / "summary.json").is_file() and (run_dir / "train.log").is_file()
    assert list((run_dir / "checkpoints").glob("*.ckpt"))
    sources = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["runtime"]["config_sources"]
    assert {"path": str(installed / "elasticface" / "configs"), "schema": "file", "provider": "main"} in sources
