"""The `head` config group: one option per registry entry (heads/registry.py), made here rather than written
as YAML, so that a head added to the registry is `head=<name>` with no config file.

Each option is what a `# @package _global_` file would hold: the head's top-level `m`, `s`, `sigma` (only the
ones it has) read from the registry by `${head_default:<name>,<key>}`, so a plain `sigma=0.02` overrides them,
and `model.head` built through the registry from `${m}`, `${s}`, `${sigma}` and every other constructor argument
of the head with the registry's value, copied here when the option is made (`guard`, `plus_assignment`, ...): so
`--cfg job` and the logged config show them, and `model.head.plus_assignment=official` overrides one without `+`.
A YAML file in configs/head/ (a preset of the user's own) is an option beside these; one named like a registry
entry would be merged onto that entry's option (Hydra's deprecated schema matching, with a warning), so presets
take names of their own.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore

from elasticface.heads.registry import HEADS, HeadEntry

GROUP = "head"


def head_option(name: str, entry: HeadEntry) -> dict[str, Any]:
    """The config `head=<name>` selects (package `_global_`)."""
    keys = list(entry.top_level())
    args = entry.args if entry.base is None else {**entry.base.args, **entry.args}  # sub-center: its base's too
    head = {"_target_": "elasticface.heads.build_head", "name": name, **{k: "${%s}" % k for k in keys}, **args}
    defaults = {k: f"${{head_default:{name},{k}}}" for k in keys}
    if "s" in defaults:  # the `scale` rule: class_count (train.yaml's) or the head's own (a config without `scale`)
        defaults["s"] = f"${{head_scale:{name},${{oc.select:scale,head}}}}"
    return {**defaults, "model": {"head": head}}


def register_head_group() -> None:
    """Make the `head` group's options exactly the registry's (again on every call: the registry may have grown)."""
    store = ConfigStore.instance()
    store.repo.pop(GROUP, None)
    for name, entry in HEADS.items():
        store.store(group=GROUP, name=name, node=head_option(name, entry), package="_global_", provider="elasticface")
