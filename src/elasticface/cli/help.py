"""What the Hydra commands' `--help` shows (cli/help_answer.py prints it).

`python train.py --help`: the three common runs, the config groups a user chooses from (each head with what it
changes) and the keys checked before the run, each with the value this command line gives it, what it accepts and
what it does (cli/config_rules.py: one source); `python train.py --help <group>`: one group's options, each with its
whole description. The templates in configs/train.yaml and eval.yaml call these as resolvers (registered by
cli/resolvers.py); `help_answer.answer_help` renders them. Groups that only other configs select (the bases they
compose, one row of a benchmark table) are left out: HIDDEN names each with its reason. Read without torch, like
the rest of the help.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from elasticface.heads.table import head_lines
from elasticface.utils.config import config_dir

#: what each group chooses, in the order a user meets them (a group of configs/ missing here fails tests/test_help.py)
GROUPS = {
    "head": "the margin head; sets m, s, sigma to its paper's values (sigma=0.02 overrides them). The s below is the "
            "paper's: a run uses √2·ln(C-1) for its C classes (scale=class_count) unless scale=head",
    "backbone": "the network (iresnet*, mobilefacenet*: insightface's; the others: timm's)",
    "data": "the training faces: built-in synthetic ones, image folders, insightface RecordIO (data.root=...)",
    "model": "the class layer: every class centre, Partial FC's sampled centres, or centres sharded over GPUs",
    "margin_schedule": "how much of the head's margin each step applies",
    "optimizer": "the optimizer (optimizer.lr=...)",
    "scheduler": "the learning-rate schedule",
    "trainer": "where and how long it trains (trainer.max_epochs=..., trainer.devices=...)",
    "logger": "where the metrics go",
    "callbacks": "what runs beside the steps (checkpoints, progress, plots); none keeps only what a run needs",
    "recipe": "whose head arguments: the registry's (paper) or the released ElasticFace code's (released)",
    "finetune": "how weights=<file> trains: recipe (selected by weights=, chosen over three domains) or none "
                "(from-scratch settings)",
    "experiment": "a documented run or a paper recipe, selected explicitly",
    "hparams_search": "a sweep, with -m: the paper's Tables I/II, an Optuna search, the LFW fold-10 benchmark",
    "launcher": "where a multirun's jobs run",
    "debug": "a checked, smaller run: tiny finishes in seconds",
    "paths": "where runs are written (logs/ under the working directory)",
    "extras": "what a run prints at start (extras.print_config=short|full|false)",
    "local": "this machine's own overrides (data roots, W&B entity), git-ignored",
}
#: groups that other configs select, never a user's command line
HIDDEN = {
    "_shared": "the bases that data options compose",
    "debug/data_size": "a debug mode's data sizes, chosen by the debug and data options",
    "recipe_head": "a recipe's head arguments, chosen by recipe and head",
    "paper_row": "one row of the paper's tables, chosen by hparams_search=paper_table1/2",
    "lfw_row": "one row of the LFW fold-10 benchmark, chosen by hparams_search=lfw_fold10",
    "lfw_remedy": "one remedy of the LFW remedy table, chosen by hparams_search=lfw_fold10_remedies",
    "finetune_row": "one row of the fine-tuning table, chosen by hparams_search=cfp_finetune",
}
WIDTH = 110
#: the widest `key=value` of the keys' column; a longer one has its description on the lines below it
KEY_COLUMN = 34
#: the widest option name column of `--help <group>`; a group with longer names has each description below its name
NAME_COLUMN = 24
#: Hydra's flags that take the next argument as their value (not a group name)
HYDRA_VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun",
                     "--cfg", "-c", "--package", "-p", "--info", "-i")


def group_options(group: str) -> list[str]:
    """The options of a config group: its YAML files and the options registered in code (the head group)."""
    node: Any = ConfigStore.instance().repo
    for part in group.split("/"):  # nested groups (hydra/sweeper/pruner) are nested in the store
        node = node.get(part, {}) if isinstance(node, dict) else {}
    registered = {n for n in node if n.endswith(".yaml")}
    files = {p.name for p in (config_dir() / group).glob("*.yaml")}
    return sorted(name.removesuffix(".yaml") for name in files | registered)


def config_group_options(group: str) -> str:
    """`group: a, b, c`, the options of a config group (a `--help` template's line), or a hint when it has none."""
    options = group_options(group)
    if not options and (config_dir() / group / "default.yaml.example").exists():
        return f"{group}: none (cp configs/{group}/default.yaml.example configs/{group}/default.yaml)"
    return f"{group}: {', '.join(options) or 'none'}"


def config_groups() -> list[str]:
    """Every group of the config tree, nested ones as `parent/child`: the folders of configs/ and the groups
    registered in code (head)."""
    root = config_dir()
    folders = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    registered = {g for g, v in ConfigStore.instance().repo.items() if isinstance(v, dict) and g != "hydra"}
    return sorted(folders | registered)


def options(group: str) -> list[str]:
    """A group's options, with those of its nested groups that are not HIDDEN (`experiment=released/<name>`)."""
    nested = [g for g in config_groups() if g.startswith(group + "/") and g not in HIDDEN]
    return group_options(group) + [f"{g[len(group) + 1:]}/{o}" for g in nested for o in group_options(g)]


def _marked(names: list[str], chosen: str | None) -> list[str]:
    return [name + ("*" if name == chosen else "") for name in names]


def group_text(group: str, chosen: str | None = None) -> str:
    """A group's description and options (`*` on the chosen one): heads one per line with what each changes."""
    lines = textwrap.wrap(GROUPS[group], WIDTH, initial_indent=f"{group:<18}", subsequent_indent=" " * 18)
    if group == "head":
        return "\n".join(lines + ["  " + line for line in head_lines(chosen)])
    text = ", ".join(_marked(options(group), chosen)) or config_group_options(group).split(": ", 1)[1]
    lines += textwrap.wrap(text, WIDTH, initial_indent=" " * 18, subsequent_indent=" " * 18)
    return "\n".join(lines)


def groups_text(*, _root_: DictConfig) -> str:
    """`${train_help_groups:}` in the help template: every group a user chooses from, this command's choices marked."""
    choices = OmegaConf.select(_root_, "hydra.runtime.choices", default=None) or {}
    return _escape("\n".join(group_text(group, choices.get(group)) for group in GROUPS))


def _shown(value: Any) -> str:
    """A value as a command line types it: null, true, [0.6,0.85]."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_shown, value)) + "]"
    return str(value)


def key_value(cfg: DictConfig | None, key: str) -> str:
    """`key=value` as `cfg` composes it (an interpolation resolved, one that cannot be yet as written: `???`,
    `${data.root}`), or `key` alone where `cfg` does not hold it (a group that holds it is not chosen)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_missing=False) if parent and cfg is not None else cfg
    if not isinstance(node, DictConfig) or leaf not in node.keys():
        return key
    try:
        value = node[leaf]
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException:  # `???`, or an interpolation of what is not there yet
        value = OmegaConf.to_container(node, resolve=False)[leaf]
    return f"{key}={_shown(value)}"


def rule_text(rule: Any) -> str:
    """What a key accepts, then what it does (its rule's `describe()` and `doc`)."""
    return rule.describe() + (f"; {rule.doc}" if rule.doc else "")


def keys_text(command: str, *, _root_: DictConfig | None = None) -> str:
    """`${keys_help:train}` in the help template: each key the command checks, as `key=value` with the value this
    command line gives it, what it accepts and what it does (cli/config_rules.py: the rules are the one source)."""
    from elasticface.cli.config_rules import EVAL, TRAIN

    rules = TRAIN if command == "train" else EVAL
    shown = {key: key_value(_root_, key) for key in rules}
    width = min(max(map(len, shown.values())), KEY_COLUMN) + 2
    lines = []
    for key, rule in rules.items():
        left = shown[key]
        first = f"{left:<{width}}" if len(left) < width - 1 else ""
        if not first:
            lines.append(left)
        lines += textwrap.wrap(rule_text(rule), WIDTH, initial_indent=first or " " * width,
                               subsequent_indent=" " * width, break_on_hyphens=False)
    return _escape("\n".join(lines))


def _escape(text: str) -> str:
    """Hydra fills the template with string.Template: a `$` of ours stays a `$`."""
    return text.replace("$", "$$")


def option_description(path: Path) -> list[str]:
    """An option's whole leading comment (after `# @package`, up to its first blank comment line) as paragraphs: the
    prose lines joined, each command or example line (`#   python train.py ...`) kept as it is, `  ` before it."""
    paragraphs: list[str] = []
    prose = False
    for line in path.read_text().splitlines():
        if not line.startswith("#") or (paragraphs and not line.strip("# ")):
            break
        if line.startswith("# @package") or not line.strip("# "):
            continue
        text = line[1:].removeprefix(" ")
        if text.startswith((" ", "python ", "elasticface-")):
            paragraphs.append("  " + text.strip())
            prose = False
        elif prose:
            paragraphs[-1] += " " + text.strip()
        else:
            paragraphs.append(text.strip())
            prose = True
    return paragraphs


def _wrapped(paragraphs: list[str], first: str, indent: int) -> list[str]:
    """Paragraphs wrapped to WIDTH after a first column `first` of `indent` characters; a command line stays whole."""
    lines: list[str] = []
    for paragraph in paragraphs or [""]:
        lead = first if not lines else " " * indent
        if paragraph.startswith("  "):
            lines.append((lead + paragraph).rstrip())
        else:
            lines += textwrap.wrap(paragraph, WIDTH, initial_indent=lead, subsequent_indent=" " * indent,
                                   break_on_hyphens=False) or [lead.rstrip()]
    return lines


def one_group_help(group: str) -> str:
    """`python train.py --help <group>`: the group's options, each with its file's whole leading comment."""
    if group == "head":
        return group_text(group)
    names = options(group)
    if not names:  # local: none yet, and how to make one
        return f"{group}: {GROUPS[group]}\n  {config_group_options(group).split(': ', 1)[1]}"
    width = max(map(len, names)) + 4
    if width > NAME_COLUMN:  # long names (experiment=released/...): each on its own line, its description below
        described = [[f"  {name}", *_wrapped(option_description(config_dir() / group / (name + ".yaml")), " " * 6, 6)]
                     for name in names]
    else:
        described = [_wrapped(option_description(config_dir() / group / (name + ".yaml")), f"  {name:<{width - 2}}",
                              width) for name in names]
    spaced = any(len(lines) > 1 for lines in described)  # options of several lines each: a blank line between
    return "\n".join([f"{group}: {GROUPS[group]}", *("\n".join(lines) + ("\n" if spaced else "")
                                                     for lines in described)]).rstrip()


def answer_group_help(prog: str, argv: Sequence[str] | None = None) -> None:
    """`--help <group>`: print that group's help and exit 0; a group users do not choose: one line, exit status 2.
    Any other command line returns (`help_answer.answer_help` answers `--help` with the whole help)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help" not in argv and "-h" not in argv:
        return
    asked = [arg for before, arg in zip(["", *argv], argv)
             if not arg.startswith("-") and "=" not in arg and before not in HYDRA_VALUE_FLAGS]
    if not asked:
        return
    for group in asked:
        if group not in GROUPS:
            print(f"{prog}: error: --help {group}: not one of the config groups ({', '.join(GROUPS)})",
                  file=sys.stderr)
            raise SystemExit(2)
    print("\n\n".join(one_group_help(group) for group in asked))
    raise SystemExit(0)
