"""What the Hydra commands' `--help` shows (their templates call these as resolvers, registered by cli/resolvers.py).

`python train.py --help`: the config groups a user chooses from, each head with what it changes, and the config
with the values m, s and sigma take; `python train.py --help <group>`: one group's options, each described.
Groups that only other configs select (the bases they compose, one row of a benchmark table) are left out: HIDDEN
names each with its reason. Read without torch, like the rest of the help.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from elasticface.heads.registry import TOP_LEVEL
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
    "finetune": "how weights=<file> trains: recipe (selected by weights=, measured on CFP) or none (from-scratch "
                "settings)",
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
#: Hydra's flags that take the next argument as their value (not a group name)
HYDRA_VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")


def group_options(group: str) -> list[str]:
    """The options of a config group: its YAML files and the options registered in code (the head group)."""
    registered = {n for n in ConfigStore.instance().repo.get(group, {}) if n.endswith(".yaml")}
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


def config_text(*, _root_: DictConfig) -> str:
    """`${train_help_config:}` in the help template: the job's config, m, s and sigma as the values they take."""
    job = OmegaConf.masked_copy(_root_, [k for k in _root_ if k != "hydra"])
    for key in TOP_LEVEL:
        job[key] = OmegaConf.select(_root_, key)
    return _escape(OmegaConf.to_yaml(job).rstrip())


def keys_text(command: str) -> str:
    """`${keys_help:train}` in the help template: each key the command checks, what it accepts and what it does
    (cli/config_rules.py: the rules are the one source)."""
    from elasticface.cli.config_rules import EVAL, TRAIN

    rules = TRAIN if command == "train" else EVAL
    width = max(map(len, rules)) + 2
    lines = []
    for key, rule in rules.items():
        text = rule.describe() + (f"; {rule.doc}" if rule.doc else "")
        lines += textwrap.wrap(text, WIDTH, initial_indent=f"{key:<{width}}", subsequent_indent=" " * width)
    return _escape("\n".join(lines))


def _escape(text: str) -> str:
    """Hydra fills the template with string.Template: a `$` of ours stays a `$`."""
    return text.replace("$", "$$")


def option_description(path: Path, width: int = WIDTH) -> str:
    """The first sentence of an option's leading comment (after `# @package`), cut to `width` characters."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or (comment and not line.strip("# ")):
            break
        if not line.startswith("# @package"):
            comment.append(line.strip("# "))
    # a sentence ends at a full stop before a capital, not after an abbreviation ("Sec. II")
    sentence = re.split(r"(?<![\s(][A-Za-z]{3})\.\s+(?=[A-Z`])", " ".join(comment), maxsplit=1)[0].rstrip(".")
    return sentence if len(sentence) <= width else textwrap.shorten(sentence, width, placeholder=" ...")


def one_group_help(group: str) -> str:
    """`python train.py --help <group>`: the group's options, each with its file's first comment line."""
    if group == "head":
        return group_text(group)
    names = options(group)
    width = max(map(len, names), default=0) + 2
    described = [f"  {name:<{width}}{option_description(config_dir() / group / (name + '.yaml'), WIDTH - width)}"
                 .rstrip() for name in names]
    return "\n".join([f"{group}: {GROUPS[group]}", *described])


def answer_group_help(prog: str, argv: Sequence[str] | None = None) -> None:
    """`--help <group>`: print that group's help and exit 0; a group users do not choose: one line, exit status 2.
    Any other command line returns (Hydra answers `--help` with the whole help)."""
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
