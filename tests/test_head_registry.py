"""Every configs/head/<name>.yaml agrees with the head registry (heads/registry.py), the one source of the
heads' defaults: same heads, same top-level m, s, sigma, same class and arguments, m/s/sigma interpolated."""

import inspect
from pathlib import Path

import pytest
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from elasticface.heads.registry import HEADS, HeadEntry, build_head, with_omitted_arguments

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
OLD_NODES = {
    "cosface": {"_target_": "elasticface.heads.CosFace", "s": 64.0, "m": 0.35, "gradient": "exact"},
    "subcenter_cosface": {
        "_target_": "elasticface.heads.SubCenter",
        "k": 3,
        "base": {"_target_": "elasticface.heads.CosFace", "s": 64.0, "m": 0.35},
    },
    "subcenter_elastic_arc_plus": {
        "_target_": "elasticface.heads.SubCenter",
        "k": 3,
        "base": {
            "_target_": "elasticface.heads.ElasticArcFace",
            "s": 64.0,
            "m": 0.5,
            "sigma": 0.0175,
            "plus": True,
            "plus_assignment": "paper",
        },
    },
}


def _described(head) -> list[str]:
    heads = [head, head.base] if hasattr(head, "base") else [head]
    return [f"{type(h).__name__}({h.extra_repr()})" for h in heads]


@pytest.mark.parametrize("name", sorted(OLD_NODES))
def test_a_head_node_that_omits_arguments_gets_the_registry_values(name):
    """Old checkpoints' head nodes name fewer arguments: the omitted ones come from the registry, and the head
    is the one `head=<name>` builds today."""
    old = OLD_NODES[name]
    with pytest.raises(InstantiationException, match="required keyword-only argument"):
        instantiate(old)
    assert _described(instantiate(with_omitted_arguments(old))) == _described(build_head(name))
    key, value = ("k", 5) if "k" in old else ("m", 0.3)
    assert with_omitted_arguments({**old, key: value})[key] == value  # a given argument wins


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_complete_head_node_is_left_as_it_is(path):
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=True)["model"]["head"]
    completed = with_omitted_arguments(node)
    assert completed == node and list(completed) == list(node)
