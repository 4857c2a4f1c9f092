"""Every command has its entry in src/elasticface/cli/, and the older `python -m` paths still run the same one."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from conftest import ROOT

from elasticface.cli.arguments import key_value_args

#: the older module paths the README once named, and the command each still runs
OLDER_PATHS = {"elasticface.eval.embed": "embed", "elasticface.data.convert": "convert", "elasticface.report": "report"}


def test_every_console_script_is_a_main_in_cli():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        command = name.removeprefix("elasticface-").replace("-", "_")  # elasticface-toy-2d: cli/toy_2d.py
        assert target == f"elasticface.cli.{command}:main", f"{name} = {target}: commands live in cli/<command>.py"
        assert (ROOT / "src" / "elasticface" / "cli" / f"{command}.py").is_file()
    assert set(OLDER_PATHS.values()) <= {n.removeprefix("elasticface-") for n in scripts}


def test_older_module_paths_run_the_cli_command_and_help_needs_no_torch():
    def help_of(module: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", module, "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    runs = {old: (help_of(old), help_of(f"elasticface.cli.{command}")) for old, command in OLDER_PATHS.items()}
    no_torch = subprocess.run(
        [sys.executable, "-c", "import sys\nfor c in ('embed', 'export', 'convert', 'report', 'toy_2d'):\n"
         "    try: __import__(f'elasticface.cli.{c}', fromlist=['main']).main(['--help'])\n"
         "    except SystemExit: pass\nprint(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"],
        capture_output=True, text=True, timeout=120)
    for old, (old_run, new_run) in runs.items():
        old_out, old_err = old_run.communicate(timeout=120)
        new_out, new_err = new_run.communicate(timeout=120)
        assert old_run.returncode == new_run.returncode == 0, old_err + new_err
        assert old_out == new_out and "usage:" in new_out, old
    assert no_torch.stdout.splitlines()[-1] == "[]", no_torch.stdout + no_torch.stderr


def test_key_value_arguments_become_options():
    argv = ["weights=a.ckpt", "batch_size=4", "flip=false", "resize=True", "check=false",
            "--out=x=y.npy", "--images", "faces", "positional", "-v"]  # a value with '=' goes as --key=value
    assert key_value_args(argv, flags=("flip", "resize")) == [
        "--weights", "a.ckpt", "--batch-size", "4", "--no-flip", "--resize",
        "--check", "false", "--out=x=y.npy", "--images", "faces", "positional", "-v"]
