"""`python train.py --help`: the groups a user chooses from (no internal ones), each head with what it changes, the
values m, s and sigma take; `--help <group>`: that group's options, each described; a group that does not exist:
one line, exit status 2. Answered without importing torch."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

from elasticface.cli.help import GROUPS, HIDDEN, config_groups, option_description
from elasticface.heads.registry import HEADS
from elasticface.utils.config import config_dir


def train(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_every_config_group_is_described_or_hidden():
    """A new group folder must be described for users (GROUPS) or named as internal (HIDDEN)."""
    top_level = {group.split("/")[0] for group in config_groups()} - {"hydra"}
    nested_internal = {group for group in config_groups() if "/" in group} - {"experiment/released"}
    assert top_level - set(GROUPS) - set(HIDDEN) == set()
    assert nested_internal <= set(HIDDEN)
    assert set(GROUPS).isdisjoint(HIDDEN)


def test_help_lists_the_user_groups_the_heads_and_resolved_values(tmp_path):
    out = train("--help", "head=elastic_arc_plus", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    groups, rest = text.split("== Keys checked before the run")
    keys, config = rest.split("== Config: ")
    from elasticface.cli.config_rules import TRAIN

    assert re.findall(r"^([\w.]+) {2,}", keys, flags=re.MULTILINE) == list(TRAIN), "each checked key, one source"
    assert re.search(r"^sigma +a number >= 0, or null; ElasticFace's margin standard deviation", keys, re.MULTILINE)
    listed = re.findall(r"^(\w+) {2,}", groups, flags=re.MULTILINE)
    assert listed == list(GROUPS), "the user's groups, in order, and none other"
    for internal in HIDDEN:
        assert not re.search(rf"^{re.escape(internal)}\b", groups, flags=re.MULTILINE), internal
    for name, entry in HEADS.items():  # each head on its own line with what it changes
        (line,) = [line for line in groups.splitlines() if line.split()[:1] in ([name], [name + "*"])]
        assert entry.about.replace("`", "") in line, line
    assert re.search(r"^  elastic_arc_plus\* +m=0.5, s=64, sigma=0.0175 ", groups, flags=re.MULTILINE)
    assert "released/ms1mv2_r100_elastic_arc" in groups and "tiny*" in groups
    assert re.search(r"^m: 0.5\ns: class_count\nsigma: 0.0175\n", config, flags=re.MULTILINE), config[:400]
    assert "head_default" not in config and "head_scale" not in config, "values, not interpolation text"
    assert "seed: ${seed}" in config, "other interpolations stay what they point to"


def test_help_of_one_group(tmp_path):
    out = train("--help", "trainer", "head", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(f"trainer: {GROUPS['trainer']}\n")
    assert re.search(r"^  gpu +One GPU: bf16 autocast", out.stdout, flags=re.MULTILINE)
    assert re.search(r"^  elastic_cos_plus +m=0.35, s=64, sigma=0.025 ", out.stdout, flags=re.MULTILINE)


@pytest.mark.parametrize("group", ["nosuch", "paper_row"])
def test_help_of_a_group_users_do_not_choose_is_one_line_exit_2(tmp_path, group):
    out = train("--help", group, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [f"elasticface-train: error: --help {group}: not one of the config groups "
                                       f"({', '.join(GROUPS)})"]


def test_hydra_flag_values_are_not_group_names(capsys):
    from elasticface.cli.help import answer_group_help

    answer_group_help("elasticface-train", ["--help", "--config-name", "train", "head=arcface"])  # returns: Hydra's
    with pytest.raises(SystemExit) as stop:
        answer_group_help("elasticface-train", ["-cn", "train", "--help", "optimizer"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("optimizer: ")


def test_option_descriptions_are_first_sentences(tmp_path):
    path = tmp_path / "option.yaml"
    path.write_text("# @package _global_\n# The paper's toy example (Sec. II, Fig. 2): a 2-D embedding. More here.\n"
                    "# and here\nkey: 1\n")
    assert option_description(path) == "The paper's toy example (Sec. II, Fig. 2): a 2-D embedding"
    assert option_description(path, width=30) == "The paper's toy example ..."
    path.write_text("key: 1\n# not a description\n")
    assert option_description(path) == ""
    described = [option_description(p) for p in config_dir().glob("trainer/*.yaml")]
    assert all(described), "every trainer option says what it is"
