"""configs/local/default.yaml.example: what a per-machine file looks like, and that both commands take it."""

from __future__ import annotations

import shutil
import subprocess

import yaml
from conftest import ROOT, compose_eval
from hydra.utils import instantiate

from elasticface.cli.compose import compose_train

EXAMPLE = ROOT / "configs" / "local" / "default.yaml.example"


def _local_dir(tmp_path):
    """A search-path folder holding the example as local/default.yaml (what `cp` in its header makes)."""
    (tmp_path / "extra" / "local").mkdir(parents=True)
    shutil.copy(EXAMPLE, tmp_path / "extra" / "local" / "default.yaml")
    return f"hydra.searchpath=[file://{tmp_path / 'extra'}]"


def test_the_example_ships_and_its_copy_is_git_ignored():
    assert EXAMPLE.is_file()
    ignored = subprocess.run(["git", "check-ignore", "-q", "configs/local/default.yaml"], cwd=ROOT)
    shipped = subprocess.run(["git", "check-ignore", "-q", str(EXAMPLE.relative_to(ROOT))], cwd=ROOT)
    assert (ignored.returncode, shipped.returncode) == (0, 1), "the copy must be ignored, the example not"


def test_train_and_eval_compose_with_the_example(tmp_path):
    values = yaml.safe_load(EXAMPLE.read_text())
    cfg = compose_train(["debug=tiny", "data=recordio", _local_dir(tmp_path)], tmp_path)
    assert cfg.data.root == values["data"]["root"] and cfg.data.val_root == values["data"]["val_root"]
    assert cfg.paths.log_dir == f"{cfg.paths.root_dir}/logs"
    # the command line still wins over the local file
    assert compose_train(["debug=tiny", "data=recordio", "data.root=/else", _local_dir(tmp_path / "b")],
                         tmp_path).data.root == "/else"
    # under the default synthetic data the roots are unused and the datamodule still builds
    synthetic = compose_train(["debug=tiny", _local_dir(tmp_path / "c")], tmp_path)
    instantiate(synthetic.data)
    eval_cfg = compose_eval([_local_dir(tmp_path / "d")])
    assert eval_cfg.data.val_root == values["data"]["val_root"]
