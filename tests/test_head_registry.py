"""The head registry (heads/registry.py) is the one home of the heads' defaults: every configs/head/<name>.yaml
names a registered head and restates none of its values, and no constructor has a default of its own."""

import inspect
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from elasticface.heads.registry import HEADS, HeadEntry

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "head"
FILES = sorted(CONFIGS.glob("*.yaml"))


def test_the_head_group_and_the_registry_name_the_same_heads():
    assert sorted(p.stem for p in FILES) == sorted(HEADS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_head_yaml_names_the_head_and_restates_no_value(path):
    """The YAML builds its head through the registry and reads m, s, sigma from it: no number, no argument."""
    name, entry = path.stem, HEADS[path.stem]
    cfg = OmegaConf.load(path)
    node = OmegaConf.to_container(cfg.model.head, resolve=False)
    keys = [k for k in ("m", "s", "sigma") if getattr(entry, k) is not None]
    assert node == {"_target_": "elasticface.heads.build_head", "name": name, **{k: "${%s}" % k for k in keys}}
    top = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "model"}
    assert top == {k: f"${{head_default:{name},{k}}}" for k in keys}
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert {k: resolved[k] for k in keys} == {k: getattr(entry, k) for k in keys}


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


def test_a_throw_away_head_is_one_class_and_one_registry_line(monkeypatch):
    """Adding a head: a MarginHead subclass with one `train_plan`, and one registry entry. build_head, the
    `${head_default:...}` resolver, the dense logits and the chunked classifier then take it as they are."""
    import torch
    import torch.nn.functional as F

    from elasticface.classifier import Classifier, FullFC
    from elasticface.cli.resolvers import head_default
    from elasticface.heads import build_head
    from elasticface.heads.base import MarginHead, check_range
    from elasticface.heads.plan import HeadInputs, HeadPlan

    class HalfMargin(MarginHead):
        """Target ``s·(cos θ_y - m/2)``: a CosFace with half the margin (a throw-away for this test)."""

        def __init__(self, *, s: float, m: float) -> None:
            super().__init__(s)
            self.m = check_range("m", m, 0.0, 2.0)

        def train_plan(self, batch: HeadInputs) -> HeadPlan:
            s = self.s
            return HeadPlan((batch.cos_y - self.m / 2) * s, lambda c: c * s, s)

    monkeypatch.setitem(HEADS, "half_margin", HeadEntry(HalfMargin, m=0.4, s=30.0))
    assert head_default("half_margin", "m") == 0.4 and head_default("half_margin", "s") == 30.0
    head = build_head("half_margin")
    assert (head.m, head.s) == (0.4, 30.0) and build_head("half_margin", m=None, s=10.0).s == 10.0
    g = torch.Generator().manual_seed(0)
    emb, weight = torch.randn(6, 8, generator=g), torch.randn(5, 8, generator=g)
    labels = torch.tensor([0, 4, 2, -1, 1, 3])
    cos = F.linear(F.normalize(emb), F.normalize(weight)).clamp(-1, 1)
    logits, _ = head.logits(cos, labels)
    rows = torch.arange(6)[labels >= 0]
    # the independent rule, written out: 30·cos everywhere, 30·(cos - 0.2) at each labelled row's class
    want = 30.0 * cos
    want[rows, labels[rows]] = 30.0 * (cos[rows, labels[rows]] - 0.2)
    torch.testing.assert_close(logits, want)
    layer = FullFC(8, 5)
    layer.weight.data.copy_(weight)
    dense = F.cross_entropy(want, labels, ignore_index=-1)
    chunked = Classifier(layer, head, chunk_size=2, path="chunked")(emb, labels).loss
    torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-6)
