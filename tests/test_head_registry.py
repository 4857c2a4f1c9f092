"""Every configs/head/<name>.yaml agrees with the head registry (heads/registry.py), the one source of the
heads' defaults: same heads, same top-level m, s, sigma, same class and arguments, m/s/sigma interpolated."""

import inspect
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from elasticface.heads.registry import HEADS, HeadEntry

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "head"
FILES = sorted(CONFIGS.glob("*.yaml"))


def test_the_head_group_and_the_registry_name_the_same_heads():
    assert sorted(p.stem for p in FILES) == sorted(HEADS)


def _check_node(where: str, raw, entry: HeadEntry, top: dict):
    node = OmegaConf.to_container(raw, resolve=False)
    cls = get_class(node.pop("_target_"))
    assert cls is entry.cls, f"{where}._target_: YAML {cls.__name__}, registry {entry.cls.__name__}"
    base = node.pop("base", None)
    expected = entry.kwargs() if base is None else dict(entry.args)
    for key, value in node.items():
        if isinstance(value, str) and value.startswith("${"):
            value = top[value[2:-1]]
        assert key in expected, f"{where}.{key}: in the YAML ({value!r}) but not in the registry"
        assert value == expected[key], f"{where}.{key}: YAML {value!r}, registry {expected[key]!r}"
    missing = set(expected) - set(node)
    assert not missing, f"{where}: registry arguments {sorted(missing)} missing from the YAML"
    if base is not None:
        inner = HeadEntry(entry.base.cls, entry.m, entry.s, entry.sigma, entry.base.args, aliases=entry.base.aliases)
        _check_node(f"{where}.base", OmegaConf.create(base), inner, top)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_head_yaml_matches_the_registry(path):
    cfg = OmegaConf.load(path)
    entry = HEADS[path.stem]
    for key in ("m", "s", "sigma"):
        assert key in cfg, f"{path}: top-level {key} missing (null where the head has none)"
        assert cfg[key] == getattr(entry, key), f"{path}: {key}: YAML {cfg[key]!r}, registry {getattr(entry, key)!r}"
    _check_node(f"{path}: model.head", cfg.model.head, entry, {k: cfg[k] for k in ("m", "s", "sigma")})


def _entries() -> dict[str, HeadEntry]:
    """Every entry the registry builds from, sub-center bases included (`<name>.base`)."""
    out = dict(HEADS)
    out.update({f"{name}.base": entry.base for name, entry in HEADS.items() if entry.base is not None})
    return out


ENTRIES = _entries()


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_the_registry_is_the_only_home_of_the_defaults(name):
    """A constructor default for an argument the registry supplies would be a second home of the value, so
    the heads take those arguments keyword-only with no default."""
    entry = ENTRIES[name]
    params = inspect.signature(entry.cls.__init__).parameters
    supplied = set(entry.kwargs() if entry.base is None else entry.args)  # a wrapper's m, s, sigma go to its base
    unknown = supplied - set(params)
    assert not unknown, f"{name}: the registry supplies {sorted(unknown)}, which {entry.cls.__name__} does not take"
    doubled = sorted(k for k in supplied if params[k].default is not inspect.Parameter.empty)
    assert not doubled, f"{name}: {entry.cls.__name__}.__init__ has defaults for {doubled}, which the registry supplies"
    positional = sorted(k for k in supplied if params[k].kind is not inspect.Parameter.KEYWORD_ONLY)
    assert not positional, f"{name}: {entry.cls.__name__}.__init__ takes {positional} by position, not keyword-only"


# head nodes as checkpoints saved before the constructors lost their defaults hold them (resolved)
