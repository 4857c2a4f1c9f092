"""The command line checked before Hydra starts the job: every unknown key at once with the nearest existing ones,
an unknown group option with the options, then every value by its rule (cli/config_rules.py).

Run before `@hydra.main`, so a mistake costs the composition (well under a second, no torch) and leaves no run
folder behind. A sweep (`-m`) is checked with each swept key's first value composed and every other value by
its rule. A command line that names its own config tree (`--config-dir`, `--config-name`) is checked inside the
job instead, where Hydra has composed it.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType, ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from elasticface.cli.compose import compose_config
from elasticface.cli.config_rules import check_config
from elasticface.cli.help import options as group_options
from elasticface.utils.config import check_mandatory
from elasticface.utils.errors import BadValue
from elasticface.utils.rule_kinds import ByChoice, Rule

#: flags Hydra answers without running the job (help, config printing, completion)
INFO_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc",
              "--resolve", "--package", "-p", "--version")
#: flags that point Hydra at another config tree
TREE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")


def _parse(overrides: Sequence[str]) -> list[Override]:
    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as err:
        raise BadValue(f"cannot read the command line: {str(err).splitlines()[0]}") from None


def _as_text(override: Override, value: Any) -> str:
    return f"{override.get_key_element()}={value}"


def _first(override: Override) -> str:
    """The override with a sweep's first value (a sweep composes once, at its first value)."""
    if not override.is_sweep_override():
        return override.input_line
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:  # `group=glob(*)`: the first option it matches
        matched = override.value().filter(group_options(override.key_or_group))
        return _as_text(override, matched[0]) if matched else override.key_or_group + "=[]"
    return _as_text(override, next(iter(override.sweep_string_iterator())))


def _keys(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a plain container tree."""
    keys: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}{key}"
            keys.append(name)
            keys += _keys(value, name + ".")
    return keys


def _exists(cfg: DictConfig, key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return isinstance(node, DictConfig) and leaf in node.keys()


def _nearest(key: str, known: list[str]) -> str:
    leaf_matches = [k for k in known if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1] and k != key]
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.75)
    found = list(dict.fromkeys(close + leaf_matches))[:2]
    if found:
        return f"; did you mean {' or '.join(found)}?"
    return "; `--cfg job` shows every key (add a new one with +key=value)"


def _chosen(override: Override) -> list[str]:
    """The options an override of a group chooses: one, a list of several (`logger=[csv,tensorboard]`, `[]`:
    none), each value of a sweep; null chooses none, and a glob sweep is Hydra's to expand."""
    if override.is_sweep_override():
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            return []
        values = list(override.sweep_iterator())
    else:
        values = [override.value()]
    chosen = [item for value in values for item in (value if isinstance(value, list) else [value])]
    return [str(item) for item in chosen if item not in (None, "null", "None")]


def unknown_options(parsed: list[Override], groups: dict[str, Any]) -> list[str]:
    """`group=option` overrides whose option is not in the group, each with the group's options."""
    problems = []
    for override in parsed:
        group = override.key_or_group
        if group not in groups or override.type == OverrideType.DEL:
            continue
        if not override.is_sweep_override() and override.value() is None:
            problems.append(f"{group}=null: a config group takes an option; {group}=[] or ~{group} chooses none")
            continue
        options = group_options(group)
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP and not override.value().filter(options):
            problems.append(f"{override.input_line}: matches no option; the options: {', '.join(options)}")
        for value in _chosen(override):
            if options and value not in options:
                close = difflib.get_close_matches(value, options, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                problems.append(f"{group}={value}: no such option{hint}; the options: {', '.join(options)}")
    return problems


def unknown_keys(parsed: list[Override], cfg: DictConfig, groups: dict[str, Any]) -> list[str]:
    """`key=value` and `~key` overrides of keys the composed config does not hold, each with the nearest keys."""
    known = _keys(OmegaConf.to_container(cfg, resolve=False))
    known_groups = [g for g in groups if "/" not in g]
    problems = []
    for override in parsed:
        key = override.key_or_group
        if override.type in (OverrideType.ADD, OverrideType.FORCE_ADD) or key in groups or override.package:
            continue
        if not _exists(cfg, key):
            hydra = key.startswith("hydra.")
            pool = [k for k in known + known_groups if k.startswith("hydra.") == hydra]
            problems.append(f"{key}: no such key{_nearest(key, pool)}")
    return problems


@functools.lru_cache(maxsize=4)
def _default_config(config_name: str) -> DictConfig:
    """The app's config with no overrides: its groups and their choices (composed once a process)."""
    return compose_config(config_name, [], return_hydra_config=True)


def precheck(config_name: str, argv: Sequence[str], rules: dict[str, Rule]) -> DictConfig | None:
    """Check the command line `argv` of the app `config_name`: raise one BadValue listing every unknown key and
    option, or the first value that breaks its rule. Returns the composed config (None when Hydra answers the
    command line itself, or when it names another config tree)."""
    if any(arg.split("=", 1)[0] in INFO_FLAGS + TREE_FLAGS for arg in argv):
        return None
    overrides = [arg for arg in argv if not arg.startswith("-")]
    parsed = _parse(overrides)
    try:
        base = _default_config(config_name)
        groups = dict(base.hydra.runtime.choices)
        problems = unknown_options(parsed, groups)
        grouped, chosen = base, []
        # a choice may bring groups of its own (hparams_search=elastic_optuna: hydra/sweeper/pruner), chosen again
        while not problems and len(chosen) < len(now := [_first(o) for o in parsed if o.key_or_group in groups]):
            chosen = now
            grouped = compose_config(config_name, chosen, return_hydra_config=True)
            new_groups = {g: c for g, c in grouped.hydra.runtime.choices.items() if g not in groups}
            groups |= dict(grouped.hydra.runtime.choices)
            problems = unknown_options([o for o in parsed if o.key_or_group in new_groups], groups)
        problems += unknown_keys(parsed, grouped, groups)
        if problems:
            raise BadValue(" | ".join(problems))
        cfg = (compose_config(config_name, [_first(o) for o in parsed], return_hydra_config=True)
               if len(chosen) < len(parsed) else grouped)
    except (HydraException, OmegaConfBaseException) as err:
        raise BadValue(f"the command line does not compose: {str(err).splitlines()[0]}") from None
    check_mandatory(cfg)
    check_config(cfg, rules, dict(cfg.hydra.runtime.choices), strict=False)
    for override in parsed:
        rule = rules.get(override.key_or_group)
        if rule is not None and override.is_sweep_override():
            for value in override.sweep_iterator():
                rule.check(override.key_or_group, value, *([dict(cfg.hydra.runtime.choices)]
                                                           if isinstance(rule, ByChoice) else []))
    return cfg
