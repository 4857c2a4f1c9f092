"""Every command has its entry in src/elasticface/cli/; the file tools answer --help without importing torch."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from conftest import ROOT

from elasticface.cli.arguments import key_value_args

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
#: the Hydra jobs; every other command is an argparse file tool
JOBS = {"elasticface-train", "elasticface-eval"}


def test_every_console_script_is_a_main_in_cli():
    for name, target in SCRIPTS.items():
        command = name.removeprefix("elasticface-").replace("-", "_")  # elasticface-toy-2d: cli/toy_2d.py
        assert target == f"elasticface.cli.{command}:main", f"{name} = {target}: commands live in cli/<command>.py"
        assert (ROOT / "src" / "elasticface" / "cli" / f"{command}.py").is_file()
    assert JOBS <= set(SCRIPTS)


def test_no_command_lives_outside_cli():
    """A `main` or a `__main__` block elsewhere would be a second door to a command (or an old one kept open)."""
    package = ROOT / "src" / "elasticface"
    outside = [str(p.relative_to(package)) for p in package.rglob("*.py") if "cli" not in p.relative_to(package).parts
               and ("def main(" in (text := p.read_text()) or "__main__" in text)]
    assert outside == []


def test_file_tools_answer_help_without_torch():
    tools = sorted(n.removeprefix("elasticface-").replace("-", "_") for n in set(SCRIPTS) - JOBS)
    probe = (f"import sys\nfor c in {tools!r}:\n"
             "    try: __import__(f'elasticface.cli.{c}', fromlist=['main']).main(['--help'])\n"
             "    except SystemExit as e: assert e.code in (0, None), (c, e.code)\n"
             "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "[]", out.stdout[-2000:] + out.stderr[-2000:]


def test_key_value_arguments_become_options():
    argv = ["weights=a.ckpt", "batch_size=4", "flip=false", "resize=True", "check=false",
            "--out=x=y.npy", "--images", "faces", "positional", "-v"]  # a value with '=' goes as --key=value
    assert key_value_args(argv, flags=("flip", "resize")) == [
        "--weights", "a.ckpt", "--batch-size", "4", "--no-flip", "--resize",
        "--check", "false", "--out=x=y.npy", "--images", "faces", "positional", "-v"]
