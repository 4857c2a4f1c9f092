"""`python train.py --help`: the common runs (each composes), the groups a user chooses from (no internal ones), each
head with what it changes, and every checked key with its value, what it accepts and what it does (from its rule);
`--help <group>`: that group's options, each with its whole description; a group that does not exist: one line,
exit status 2. Answered without importing torch, and without Hydra's listing of every group."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout

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


def sections(text: str) -> dict[str, str]:
    """A help's `== Title ==` sections by the title's first words (`Common runs`, `Config groups`, `Keys checked`)."""
    parts = re.split(r"^== (.+?) ==\n", text, flags=re.MULTILINE)
    return {" ".join(title.split(":")[0].split()[:2]): body for title, body in zip(parts[1::2], parts[2::2])}


def key_lines(section: str) -> dict[str, tuple[str | None, str]]:
    """The keys section: key -> (its value as `key=value` shows it, or None; its text, lines joined)."""
    out: dict[str, tuple[str | None, str]] = {}
    for block in re.split(r"\n(?=\S)", section.strip().split("\n\nPowered by Hydra")[0]):
        head, _, text = block.partition("  ")
        key, eq, value = head.strip().partition("=")
        out[key] = (value if eq else None, " ".join(text.split()))
    return out


def test_help_lists_the_user_groups_the_heads_and_resolved_values(tmp_path):
    out = train("--help", "head=elastic_arc_plus", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    parts = sections(out.stdout)
    groups = parts["Config groups"]
    listed = re.findall(r"^(\w+) {2,}", groups, flags=re.MULTILINE)
    assert listed == list(GROUPS), "the user's groups, in order, and none other"
    for internal in HIDDEN:
        assert not re.search(rf"^{re.escape(internal)}\b", groups, flags=re.MULTILINE), internal
    for name, entry in HEADS.items():  # each head on its own line with what it changes
        (line,) = [line for line in groups.splitlines() if line.split()[:1] in ([name], [name + "*"])]
        assert entry.about.replace("`", "") in line, line
    assert re.search(r"^  elastic_arc_plus\* +m=0.5, s=64, sigma=0.0175 ", groups, flags=re.MULTILINE)
    assert "released/ms1mv2_r100_elastic_arc" in groups and "tiny*" in groups
    keys = key_lines(parts["Keys checked"])
    assert (keys["m"][0], keys["s"][0], keys["sigma"][0]) == ("0.5", "class_count", "0.0175"), "values, resolved"
    assert keys["data.root"][0] is None, "data=synthetic has no data.root: the key alone"
    assert len(out.stdout.splitlines()) < 250, "shorter than the 361 lines of the config dump it replaced"


@pytest.mark.parametrize("command", ["train", "eval"])
def test_every_checked_key_says_what_it_accepts_and_does_from_its_rule(tmp_path, command):
    """`--help`'s keys are the rule table's, in its order, each with its rule's values and its doc: one source."""
    from elasticface.cli.config_rules import EVAL, TRAIN
    from elasticface.cli.help import rule_text

    rules = TRAIN if command == "train" else EVAL
    assert [key for key, rule in rules.items() if not rule.doc] == [], "every key says what it does"
    out = subprocess.run([sys.executable, str(ROOT / f"{command}.py"), "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    keys = key_lines(sections(out.stdout)["Keys checked"])
    assert list(keys) == list(rules)
    for key, rule in rules.items():
        assert keys[key][1] == " ".join(rule_text(rule).split()), key
    if command == "eval":
        protocol = keys["ijb.protocol"]
        assert protocol[0] == "1v1" and protocol[1].startswith("1v1, 1n, both; 1v1: verification")
        assert "1n: identification" in protocol[1] and "both: the two" in protocol[1]
        assert "weights=null" in out.stdout and "ijb.protocol=1v1" in out.stdout
    else:
        assert "the backbone starts from this released or exported file" in keys["weights"][1]


def common_runs() -> list[tuple[str, list[str]]]:
    """The `== Common runs ==` commands of both helps: (command, its overrides), as the help prints them."""
    from hydra.core.hydra_config import HydraConfig

    from elasticface.cli.help_answer import answer_help

    runs = []
    for command in ("train", "eval"):
        out = io.StringIO()
        try:
            with redirect_stdout(out), pytest.raises(SystemExit):
                answer_help(command, ["--help"])
        finally:
            HydraConfig.instance().cfg = None  # as Hydra's help, it set the config of its process: not the tests'
        for line in sections(out.getvalue())["Common runs"].splitlines():
            if re.match(r"^  python (train|eval)\.py( [\w.]+=\S+)+$", line):
                words = line.split()
                runs.append((words[1].removesuffix(".py"), words[2:]))
    return runs


def test_the_common_runs_are_named_and_compose_as_written():
    """Train, fine-tune with weights= and evaluate, as a user types them: each composes (key names, options)."""
    from elasticface.cli.compose import compose_config, compose_train

    runs = common_runs()
    assert ("train", ["head=elastic_arc_plus", "sigma=0.0175"]) in runs
    finetune = [args for command, args in runs if command == "train" and args[0].startswith("weights=")]
    assert finetune and "data=folder" in finetune[0] and any(a.startswith("data.val_sets.pairs_file=") for a in
                                                             finetune[0])
    assert "python train.py " + " ".join(finetune[0]) in (ROOT / "docs" / "weights.md").read_text(), "the documented"
    evaluations = [args for command, args in runs if command == "eval"]
    assert {args[-1].split("=")[0] for args in evaluations} >= {"data.val_root", "image_root", "ijb.protocol",
                                                                 "megaface.root"}
    for command, args in runs:
        cfg = compose_train(args) if command == "train" else compose_config("eval", args, return_hydra_config=True)
        if command == "train" and args[0].startswith("weights="):
            assert cfg.hydra.runtime.choices.finetune == "recipe", "weights= selects the fine-tuning recipe"


def test_help_answers_without_torch_or_hydras_group_listing(tmp_path):
    """`--help` is answered by cli/help.py (Hydra's own lists every group of the tree first: 5 of its 6 s), with
    none of the training stack imported, nor numpy (cli/layouts.py and cli/job_failures.py import it when used)."""
    code = textwrap.dedent("""
        import runpy, sys
        import hydra._internal.hydra as internal
        def listing(*args, **kwargs):
            raise AssertionError("Hydra listed the config groups")
        internal.Hydra.format_config_groups = listing
        script, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            heavy = ("torch", "pytorch_lightning", "lightning", "timm", "wandb", "matplotlib", "mlflow", "numpy")
            print("imported:", sorted(m for m in heavy if m in sys.modules))
    """)
    for script, *argv in (["train.py", "--help"], ["train.py", "--help", "weights=x.pth", "experiment=ms1mv2_r100"],
                          ["train.py", "--help", "finetune"], ["eval.py", "--help", "ijb.protocol=both"]):
        out = subprocess.run([sys.executable, "-c", code, str(ROOT / script), *argv], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip().endswith("imported: []"), out.stdout[-500:]


def test_a_help_command_line_that_does_not_compose_is_one_line(tmp_path):
    out = train("--help", "head=nosuch", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == ["elasticface-train: error: the command line does not compose: In 'train': "
                                       "Could not find 'head/nosuch'"]


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
    answer_group_help("elasticface-train", ["--help", "--cfg", "job"])  # returns: the whole help
    with pytest.raises(SystemExit) as stop:
        answer_group_help("elasticface-train", ["-cn", "train", "--help", "optimizer"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("optimizer: ")


def test_help_of_a_group_gives_each_options_whole_description(tmp_path):
    """`--help finetune`: both options' whole leading comments, every word, none cut with "..."."""
    out = train("--help", "finetune", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "..." not in out.stdout
    flat = " ".join(out.stdout.split())
    for name in ("none", "recipe"):
        comment = [line.lstrip("#").strip() for line in (config_dir() / "finetune" / f"{name}.yaml").read_text()
                   .split("\n\n")[0].splitlines() if line.startswith("#") and "@package" not in line]
        assert " ".join(" ".join(comment).split()) in flat, name
    assert re.search(r"^  recipe  The fine-tuning recipe: ", out.stdout, re.MULTILINE)


def test_option_descriptions_are_whole_comments_with_their_command_lines(tmp_path):
    path = tmp_path / "option.yaml"
    path.write_text("# @package _global_\n# The paper's toy example (Sec. II, Fig. 2): a 2-D embedding. More here,\n"
                    "# and here.\n#   python train.py experiment=toy_2d\n# After the command.\n#\n# not this\n"
                    "key: 1  # nor this\n")
    assert option_description(path) == ["The paper's toy example (Sec. II, Fig. 2): a 2-D embedding. More here, "
                                        "and here.", "  python train.py experiment=toy_2d", "After the command."]
    path.write_text("key: 1\n# not a description\n")
    assert option_description(path) == []
    described = [option_description(p) for p in config_dir().glob("trainer/*.yaml")]
    assert all(described), "every trainer option says what it is"
