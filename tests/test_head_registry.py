"""The head registry (heads/registry.py) is the one home of the heads' defaults and the one list of the heads: the
`head` config group's options, the head table of the docs and the parametrised tests are made from it, and no
constructor has a default of its own. Adding a head is one file and one registry line (the last test)."""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, compose_train

from elasticface.cli.head_group import head_option
from elasticface.cli.help import config_group_options
from elasticface.cli.resolvers import register_config_code
from elasticface.heads.registry import HEADS, HeadEntry


@pytest.mark.parametrize("name", sorted(HEADS))
def test_head_option_names_the_head_and_restates_no_value(name):
    """The option builds its head through the registry and reads m, s, sigma from it; every other constructor
    argument is the registry's value (a sub-center wrapper's `k` and its base's), so the composed config shows it."""
    entry = HEADS[name]
    option = OmegaConf.create(head_option(name, entry))
    keys = [k for k in ("m", "s", "sigma") if getattr(entry, k) is not None]
    node = OmegaConf.to_container(option.model.head, resolve=False)
    args = {**(entry.base.args if entry.base else {}), **entry.args}
    assert node == {"_target_": "elasticface.heads.build_head", "name": name, **{k: "${%s}" % k for k in keys},
                    **args}
    top = {k: v for k, v in OmegaConf.to_container(option, resolve=False).items() if k != "model"}
    want = {k: f"${{head_default:{name},{k}}}" for k in keys}
    assert top == {**want, **({"s": f"${{head_scale:{name},${{oc.select:scale,head}}}}"} if "s" in keys else {})}
    resolved = OmegaConf.to_container(OmegaConf.merge({"scale": "head"}, option), resolve=True)
    assert {k: resolved[k] for k in keys} == {k: getattr(entry, k) for k in keys}


def test_the_registry_reads_without_torch():
    """`--help` and `--cfg job` list the heads from the registry: it names its classes, imported on first build."""
    code = ("import sys\nfrom elasticface.heads.registry import HEADS, head_names\nfrom elasticface.heads import "
            "build_head\nassert len(head_names()) == len(HEADS)\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_a_bad_class_location_is_named():
    with pytest.raises(ValueError, match=r"HeadEntry.cls='ArcFace': expected 'module:Class'"):
        HeadEntry("ArcFace").load()


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
    cls = entry.load()
    params = inspect.signature(cls.__init__).parameters
    supplied = set(entry.kwargs() if entry.base is None else entry.args)  # a wrapper's m, s, sigma go to its base
    unknown = supplied - set(params)
    assert not unknown, f"{name}: the registry supplies {sorted(unknown)}, which {cls.__name__} does not take"
    doubled = sorted(k for k in supplied if params[k].default is not inspect.Parameter.empty)
    assert not doubled, f"{name}: {cls.__name__}.__init__ has defaults for {doubled}, which the registry supplies"
    positional = sorted(k for k in supplied if params[k].kind is not inspect.Parameter.KEYWORD_ONLY)
    assert not positional, f"{name}: {cls.__name__}.__init__ takes {positional} by position, not keyword-only"


def test_the_head_table_lists_each_entry_with_its_registry_values():
    """Rows written out here from the papers' values (the docs' table is this text, docs/hooks/heads_table.py)."""
    from elasticface.heads.table import head_table

    lines = head_table().splitlines()
    assert len(lines) == 2 + len(HEADS) + 1  # header, one row per entry, subcenter_<name>
    assert "| `arcface` | `s·cos(θ_y + m)` | m=0.5, s=64 | guard=thmm, gradient=exact | chunked |" in lines
    assert ("| `elastic_arc_plus` | as `elastic_arc`, the largest m_i to the smallest cos θ_y | m=0.5, s=64, "
            "sigma=0.0175 | plus=true, plus_assignment=paper, rank_scope=local, gradient=exact, guard=thmm "
            "| chunked |") in lines
    assert "| `mv_softmax` | `s·(cos θ_y - m)` (hard negatives `s·((t+1) cos θ_j + t)`) | m=0.35, s=32 | " \
        "t=0.2, mode=am, guard=thmm, gradient=exact | dense |" in lines
    assert "| `adacos` | `s_t·cos θ_y`, s_t set from the batch each step | - | dynamic=true | dense |" in lines


def test_the_docs_page_holds_the_generated_table():
    """heads.md carries the marker the docs hook fills (mkdocs.yml runs the hook), and nothing is left of it."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import heads_table
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    assert "docs/hooks/heads_table.py" in (ROOT / "mkdocs.yml").read_text()
    page = heads_table.fill((ROOT / "docs" / "heads.md").read_text())
    assert heads_table.MARKER not in page and "| `subcenter_elastic_arc_plus` |" in page
    with pytest.raises(ValueError, match="heads.md: no <!-- heads-table -->"):
        heads_table.fill("# a page without the marker\n")


HALF_MARGIN = '''
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
'''
#: the one registry line of the throw-away head (its file is HALF_MARGIN, on the path as `half_margin`)
HALF_MARGIN_ENTRY = 'HeadEntry("half_margin:HalfMargin", "`s·(cos θ_y - m/2)`", m=0.4, s=30.0)'


@pytest.fixture
def half_margin(tmp_path, monkeypatch):
    """The throw-away head's file on the path and its registry line in the registry; afterwards the head group
    is made again from the registry as it was."""
    (tmp_path / "half_margin.py").write_text(HALF_MARGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(HEADS, "half_margin", eval(HALF_MARGIN_ENTRY))
    yield tmp_path
    monkeypatch.undo()
    register_config_code()


def test_a_throw_away_head_is_one_file_and_one_registry_line(half_margin, tmp_path):
    """Adding a head: a MarginHead subclass with one `train_plan` in a file, and one registry entry. The head group,
    the `${head_default:...}` resolver, build_head, the dense logits, the chunked classifier and the head table then
    take it as they are."""
    import torch
    import torch.nn.functional as F
    from hydra.utils import instantiate

    from elasticface.classifier import Classifier, FullFC
    from elasticface.heads import build_head
    from elasticface.heads.table import head_table

    cfg = compose_train(["head=half_margin", "scale=head"])  # the commands' registration and composition
    assert (cfg.m, cfg.s, cfg.sigma) == (0.4, 30.0, None)
    cfg = compose_train(["head=half_margin", "m=0.3", "scale=head"])
    head = instantiate(cfg.model.head)
    assert type(head).__name__ == "HalfMargin" and (head.m, head.s) == (0.3, 30.0)
    assert build_head("half_margin").m == 0.4 and build_head("half_margin", m=None, s=10.0).s == 10.0
    assert "| `half_margin` | `s·(cos θ_y - m/2)` | m=0.4, s=30 | - | chunked |" in head_table().splitlines()
    assert "half_margin" in config_group_options("head").removeprefix("head: ").split(", ")  # an eval-style --help

    g = torch.Generator().manual_seed(0)
    emb, weight = torch.randn(6, 8, generator=g), torch.randn(5, 8, generator=g)
    labels = torch.tensor([0, 4, 2, -1, 1, 3])
    cos = F.linear(F.normalize(emb), F.normalize(weight)).clamp(-1, 1)
    logits, _ = head.logits(cos, labels)
    rows = torch.arange(6)[labels >= 0]
    # the independent rule, written out: 30·cos everywhere, 30·(cos - 0.15) at each labelled row's class
    want = 30.0 * cos
    want[rows, labels[rows]] = 30.0 * (cos[rows, labels[rows]] - 0.15)
    torch.testing.assert_close(logits, want)
    layer = FullFC(8, 5)
    layer.weight.data.copy_(weight)
    dense = F.cross_entropy(want, labels, ignore_index=-1)
    chunked = Classifier(layer, head, chunk_size=2, path="chunked")(emb, labels).loss
    torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-6)


def test_a_throw_away_head_is_a_command_line_option_without_torch(tmp_path):
    """`python train.py --help` lists the throw-away head among the head options and `--cfg job head=half_margin
    m=0.3` composes it, both without importing torch, when its file and registry line are there."""
    (tmp_path / "half_margin.py").write_text(HALF_MARGIN)
    code = textwrap.dedent(f"""
        import runpy, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from elasticface.heads.registry import HEADS, HeadEntry
        HEADS["half_margin"] = {HALF_MARGIN_ENTRY}
        sys.argv = ["train.py", *sys.argv[1:]]
        try:
            runpy.run_path("train.py", run_name="__main__")
        finally:  # Hydra may end the process with SystemExit
            print("torch imported:", "torch" in sys.modules)
    """)
    help_out = subprocess.run([sys.executable, "-c", code, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
    assert help_out.returncode == 0, help_out.stderr
    heads = [line.split()[:3] for line in help_out.stdout.splitlines() if line.startswith("  ")]
    assert ["half_margin", "m=0.4,", "s=30"] in heads and ["elastic_arc_plus", "m=0.5,", "s=64,"] in heads
    assert "s·(cos θ_y - m/2)" in help_out.stdout, "the head's line says what it changes"
    assert help_out.stdout.strip().endswith("torch imported: False")
    job = subprocess.run([sys.executable, "-c", code, "--cfg", "job", "head=half_margin", "m=0.3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr
    cfg = OmegaConf.to_container(OmegaConf.create(job.stdout.rsplit("torch imported:", 1)[0]))  # unresolved
    assert (cfg["m"], cfg["s"], cfg["sigma"]) == (0.3, "${head_scale:half_margin,${oc.select:scale,head}}", None)
    assert cfg["model"]["head"] == {"_target_": "elasticface.heads.build_head", "name": "half_margin", "m": "${m}",
                                    "s": "${s}"}
    assert job.stdout.strip().endswith("torch imported: False")


#: what the author of a head writes besides its file and registry line: its independent reference
WRITTEN_PER_HEAD = ["tests/test_heads_oracle.py::test_loop_oracle_float64[half_margin]"]


def test_the_parametrised_tests_pick_up_a_throw_away_head(tmp_path):
    """The tests over every head read the registry: with the throw-away head's file and registry line added before
    collection (a pytest plugin), they run it without an edit and it passes them."""
    (tmp_path / "half_margin.py").write_text(HALF_MARGIN)
    (tmp_path / "half_margin_plugin.py").write_text(
        f"from elasticface.heads.registry import HEADS, HeadEntry\nHEADS['half_margin'] = {HALF_MARGIN_ENTRY}\n")
    files = ["tests/test_heads.py", "tests/test_classifier.py", "tests/test_configs.py", "tests/test_heads_oracle.py",
             "tests/test_untrusted_files.py"]
    deselect = [arg for test in WRITTEN_PER_HEAD for arg in ("--deselect", test)]
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "half_margin_plugin", *files, "-k", "half_margin",
                          *deselect, "-q", "-rA", "-p", "no:cacheprovider"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTEST_ADDOPTS": "",  # the plugin beside the package, installed or not
                              "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    passed = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("PASSED ")}
    for test in ("tests/test_heads.py::test_contract[half_margin]",
                 "tests/test_classifier.py::test_chunked_equals_dense_for_every_head[half_margin]",
                 "tests/test_classifier.py::test_auto_path_is_chunked_where_it_is_as_fast_as_dense[half_margin]",
                 "tests/test_configs.py::test_every_head_config_builds_its_head[half_margin]",
                 "tests/test_heads_oracle.py::test_gradcheck_interior[half_margin]"):
        assert test in passed, (test, sorted(passed))
