"""The head contract: registry, configs, validation, reductions, -1 labels, state, ElasticFace sampling."""

from __future__ import annotations

import copy
import math
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from elasticface.heads import MarginHead, SubCenter, build_head, head_names
from elasticface.heads.elastic import rank_assign

#: every head option that is not a sub-centre wrapper
BASE_HEADS = [n for n in head_names() if not n.startswith("subcenter_")]


def _batch(B: int = 16, C: int = 10, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    cos = torch.rand(B, C, generator=g, dtype=dtype) * 2 - 1
    labels = torch.randint(0, C, (B,), generator=g)
    norms = torch.rand(B, generator=g, dtype=dtype) * 100 + 5
    return cos, labels, norms


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra = a.argsort().argsort().double()
    rb = b.argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


# ---------------------------------------------------------------------------------------------------
# registry and contract
# ---------------------------------------------------------------------------------------------------
def test_registry_has_every_head_of_the_issue():
    want = {
        "softmax", "normface", "cosface", "arcface", "sphereface", "combined", "elastic_arc", "elastic_cos",
        "elastic_arc_plus", "elastic_cos_plus", "adacos", "curricularface", "magface", "adaface",
        "li_arcface", "mv_softmax", "circle",
    }  # fmt: skip
    assert want <= set(BASE_HEADS)
    assert "subcenter_arcface" in head_names()


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown.*arcface"):
        build_head("arcfase")


@pytest.mark.parametrize("name", BASE_HEADS + ["subcenter_arcface"])
def test_contract(name):
    head = build_head(name)
    assert isinstance(head, MarginHead)
    assert isinstance(head.needs_norms, bool) and isinstance(head.normalized, bool)
    k = head.centers_per_class
    cos, labels, norms = _batch(C=10 * k)
    labels = labels.clamp(max=9)
    labels[3] = -1
    out, plan = head.logits(cos, labels, norms if head.needs_norms else None)
    assert out.shape == (16, 10) and out.dtype == torch.float32 and torch.isfinite(out).all()
    assert plan.margins is None or (plan.margins.shape == (16,) and not plan.margins.requires_grad)
    assert (plan.aux_loss is not None) == (name == "magface")
    # nothing of the step is kept on the head: its attributes hold no tensor (buffers live in _buffers)
    assert not [k for k, v in vars(head).items() if isinstance(v, torch.Tensor)]
    ev = head(cos)
    assert ev.shape == (16, 10) and torch.isfinite(ev).all()
    if name in ("softmax",):
        assert not head.normalized and torch.equal(out, cos) and torch.equal(ev, cos)
    elif name in ("arcface", "cosface", "elastic_arc", "normface", "magface", "curricularface"):
        assert torch.equal(ev, cos * head.s)
    head(cos, labels, norms if head.needs_norms else None)
    copy.deepcopy(head)  # EMA / SWA callbacks deepcopy the model after training steps
    assert pickle.loads(pickle.dumps(head)).state_dict().keys() == head.state_dict().keys()


def test_label_minus_one_rows_get_no_margin():
    cos, labels, norms = _batch()
    labels[::2] = -1
    for name in ["arcface", "cosface", "elastic_arc_plus", "elastic_cos", "magface", "adaface", "combined",
                 "sphereface", "curricularface", "mv_softmax", "normface"]:  # fmt: skip
        head = build_head(name)
        out = head(cos, labels, norms)
        torch.testing.assert_close(out[::2], cos[::2] * head.s, rtol=0, atol=0)
    all_invalid = torch.full_like(labels, -1)
    head = build_head("elastic_arc_plus")
    out, plan = head.logits(cos, all_invalid)
    assert torch.equal(out, cos * 64.0)
    assert plan.margins[all_invalid >= 0].numel() == 0


def test_does_not_modify_input_and_keeps_grad():
    cos, labels, _ = _batch()
    keep = cos.clone()
    x = cos.clone().requires_grad_()
    build_head("arcface")(x, labels).sum().backward()
    assert torch.equal(cos, keep) and x.grad is not None


# ---------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("elastic_arc", {"sigma": -0.1}, r"sigma=-0.1: must be >= 0"),
        ("elastic_cos_plus", {"sigma": -1.0}, r"sigma=-1.0: must be >= 0"),
        ("arcface", {"s": 0.0}, r"s=0.0: must be > 0"),
        ("cosface", {"s": -3.0}, r"s=-3.0: must be > 0"),
        ("arcface", {"m": 2.0}, r"m=2.0: must be in \[0, 1.5708\)"),
        ("arcface", {"m": -0.1}, r"m=-0.1: must be in"),
        ("cosface", {"m": 2.5}, r"m=2.5: must be in \[0, 2\)"),
        ("elastic_arc", {"m": 1.7}, r"m=1.7"),
        ("elastic_arc", {"truncate": -1.0}, r"truncate=-1.0"),
        ("elastic_arc", {"plus_assignment": "random"}, r"plus_assignment='random'"),
        ("elastic_arc", {"rank_scope": "world"}, r"rank_scope='world'"),
        ("arcface", {"guard": "wrap"}, r"guard='wrap'"),
        ("arcface", {"gradient": "sg"}, r"gradient='sg'"),
        ("combined", {"m1": 0.0}, r"m1=0.0"),
        ("sphereface", {"m": 0.5}, r"m=0.5: must be in \[1, 10\]"),
        ("magface", {"u_a": 5.0}, r"u_a=5.0"),
        ("adacos", {"num_classes": 2}, r"num_classes=2"),
        ("subcenter_arcface", {"k": 0}, r"k=0: must be an integer >= 1"),
        ("circle", {"m": 1.5}, r"m=1.5"),
    ],
)
def test_bad_values_fail_at_construction(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_head(name, **kwargs)


# ---------------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("plus", [False, True])
@pytest.mark.parametrize("guard", ["thmm", "none", "continuous"])
@pytest.mark.parametrize("gradient", ["exact", "straight_through"])
def test_sigma_zero_elastic_equals_arcface_and_cosface(plus, guard, gradient):
    cos, labels, _ = _batch(B=64)
    cos[0, labels[0]] = -1.0  # θ + m > π
    labels[1] = -1
    for fixed, elastic, m in [("arcface", "elastic_arc", 0.45), ("cosface", "elastic_cos", 0.35)]:
        x1, x2 = cos.clone().requires_grad_(), cos.clone().requires_grad_()
        a = build_head(fixed, s=64.0, m=m, guard=guard, gradient=gradient)(x1, labels)
        b = build_head(elastic, s=64.0, m=m, sigma=0.0, plus=plus, guard=guard, gradient=gradient)(x2, labels)
        assert torch.equal(a, b)
        F.cross_entropy(a, labels.clamp(min=0)).backward()
        F.cross_entropy(b, labels.clamp(min=0)).backward()
        assert torch.equal(x1.grad, x2.grad)


def test_combined_reduces_to_arcface_and_cosface():
    cos, labels, _ = _batch(B=64)
    cos[0, labels[0]] = -0.999
    for guard in ["thmm", "continuous", "none"]:
        arc = build_head("arcface", m=0.5, guard=guard)(cos, labels)
        assert torch.equal(build_head("combined", m1=1.0, m2=0.5, m3=0.0, guard=guard)(cos, labels), arc)
    cosf = build_head("cosface", m=0.35)(cos, labels)
    assert torch.equal(build_head("combined", m1=1.0, m2=0.0, m3=0.35)(cos, labels), cosf)


def test_adaface_with_h_zero_is_cosface():
    cos, labels, norms = _batch(B=64, dtype=torch.float64)
    ada = build_head("adaface", m=0.4, h=0.0)(cos, labels, norms)
    torch.testing.assert_close(ada, build_head("cosface", m=0.4)(cos, labels), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["arcface", "cosface", "magface", "elastic_arc_plus", "softmax", "circle"])
def test_subcenter_k1_is_base(name):
    cos, labels, norms = _batch()
    kw = {"seed": 1} if "elastic" in name else {}
    base, wrapped = build_head(name, **kw), SubCenter(build_head(name, **kw), k=1)
    n = norms if base.needs_norms else None
    assert torch.equal(base(cos, labels, n), wrapped(cos, labels, n))
    assert wrapped.centers_per_class == 1 and wrapped.needs_norms == base.needs_norms
    assert wrapped.normalized == base.normalized


def test_subcenter_pools_the_best_subcentre_of_each_class():
    cos = torch.tensor([[0.1, 0.9, -0.5, 0.2, 0.3, 0.0]])  # C = 2, K = 3: layout [C, K]
    head = SubCenter(build_head("normface", s=1.0), k=3)
    assert head.centers_per_class == 3
    torch.testing.assert_close(head(cos, torch.tensor([0])), torch.tensor([[0.9, 0.3]]))
    with pytest.raises(ValueError, match="multiple of k"):
        head(torch.zeros(1, 5), torch.tensor([0]))
    mag = build_head("subcenter_magface", k=2)
    c, labels, norms = _batch(C=20)
    _, plan = mag.logits(c, labels.clamp(max=9), norms)
    assert mag.needs_norms and plan.aux_loss is not None and plan.margins is not None


@pytest.mark.parametrize("head", ["arcface", "subcenter_arcface"])
def test_logged_target_angle_is_the_closest_centre_of_the_class(tiny_cfg, head):
    """train/theta_y: with K sub-centres the target is the closest of the class's K columns, not column y."""

    from elasticface.training import build_module

    for path in ("dense", "chunked"):
        module = build_module(tiny_cfg(f"head={head}"), num_classes=4)
        module.classifier.path = path
        k = 3 if head.startswith("subcenter_") else 1
        g = torch.Generator().manual_seed(0)
        emb = torch.randn(5, module.centers.weight.shape[1], generator=g)
        labels = torch.tensor([3, 0, -1, 2, 1])  # -1: no class (its angle is not logged)
        out = module.classifier(emb, labels)  # the callbacks log θ_y of the rows with a label (step_statistics.py)
        cos = F.normalize(emb.double(), dim=1) @ F.normalize(module.centers.weight.detach().double(), dim=1).T
        closest = [max(cos[i, y * k + j].item() for j in range(k)) for i, y in enumerate(labels.tolist()) if y >= 0]
        expected = [math.acos(c) for c in closest]
        torch.testing.assert_close(out.theta_y[out.valid], torch.tensor(expected), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------
# ElasticFace sampling and '+' assignment
# ---------------------------------------------------------------------------------------------------
def test_sample_margins_distribution_and_truncation():
    head = build_head("elastic_arc", m=0.5, sigma=0.05, seed=0)
    d = head.sample_margins(200_000)
    assert d.shape == (200_000,) and d.dtype == torch.float32
    assert abs(d.mean().item() - 0.5) < 1e-3 and abs(d.std().item() - 0.05) < 1e-3
    t = build_head("elastic_arc", m=0.5, sigma=0.05, truncate=2.0, seed=0).sample_margins(100_000)
    assert t.min() >= 0.4 - 1e-6 and t.max() <= 0.6 + 1e-6
    # a normal truncated at ±2σ has std 0.8796σ
    assert abs(t.std().item() - 0.8796 * 0.05) < 1e-3
    nn_ = build_head("elastic_cos", m=0.05, sigma=0.1, truncate="nonneg", seed=0).sample_margins(10_000)
    assert nn_.min() >= 0
    assert torch.equal(build_head("elastic_arc", m=0.5, sigma=0.0).sample_margins(7), torch.full((7,), 0.5))


def test_margins_reproducible_differ_per_step_and_per_rank(monkeypatch):
    a, b = build_head("elastic_arc", seed=7), build_head("elastic_arc", seed=7)
    first = a.sample_margins(64)
    assert torch.equal(first, b.sample_margins(64))
    assert not torch.equal(first, a.sample_margins(64))  # a new draw every step
    assert not torch.equal(first, build_head("elastic_arc", seed=8).sample_margins(64))
    monkeypatch.setattr("elasticface.heads.elastic.rank_and_world", lambda: (1, 2))
    assert not torch.equal(first, build_head("elastic_arc", seed=7).sample_margins(64))


def test_seed_none_follows_torch_manual_seed():
    torch.manual_seed(123)
    a = build_head("elastic_arc").sample_margins(16)
    torch.manual_seed(123)
    b = build_head("elastic_arc").sample_margins(16)
    assert torch.equal(a, b)


def test_margin_stream_survives_state_dict_round_trip():
    cos, labels, _ = _batch(B=32)
    model = torch.nn.ModuleDict({"head": build_head("elastic_arc", plus=True, seed=11)})
    for _ in range(3):
        model["head"](cos, labels)
    sd = model.state_dict()
    assert "head._extra_state" in sd
    cont = model["head"](cos, labels)
    fresh = torch.nn.ModuleDict({"head": build_head("elastic_arc", plus=True, seed=999)})
    fresh.load_state_dict(sd)
    assert torch.equal(fresh["head"](cos, labels), cont)
    # and through torch.save, as in a Lightning checkpoint
    import io

    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    fresh2 = torch.nn.ModuleDict({"head": build_head("elastic_arc", plus=True)})
    fresh2.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(fresh2["head"](cos, labels), cont)


def test_one_margin_per_sample_per_step_recorded():
    cos, labels, _ = _batch(B=128)
    head = build_head("elastic_cos", m=0.35, sigma=0.05, seed=0)
    out, plan = head.logits(cos, labels)
    m = plan.margins
    assert m.shape == (128,)
    rows = torch.arange(128)
    torch.testing.assert_close(out[rows, labels], 64.0 * (cos[rows, labels] - m))
    assert not torch.equal(m, head.logits(cos, labels)[1].margins)


def test_plus_paper_rank_correlation_is_minus_one():
    g = torch.Generator().manual_seed(0)
    B = 4096
    cos_y = torch.rand(B, generator=g) * 2 - 1
    draws = torch.randn(B, generator=g) * 0.05 + 0.5
    valid = torch.ones(B, dtype=torch.bool)
    out = rank_assign(draws, cos_y, valid, "paper")
    assert _spearman(out, cos_y) == pytest.approx(-1.0, abs=1e-9)
    assert torch.equal(out.sort().values, draws.sort().values)  # a permutation of the draws
    off = rank_assign(draws, cos_y, valid, "official")
    assert abs(_spearman(off, cos_y)) < 0.06
    assert torch.equal(off.sort().values, draws.sort().values)


def test_plus_with_label_minus_one_ranks_only_valid_rows():
    g = torch.Generator().manual_seed(1)
    B = 300
    cos_y = torch.rand(B, generator=g) * 2 - 1
    draws = torch.randn(B, generator=g) * 0.05 + 0.5
    valid = torch.rand(B, generator=g) > 0.3
    out = rank_assign(draws, cos_y, valid, "paper")
    assert _spearman(out[valid], cos_y[valid]) == pytest.approx(-1.0, abs=1e-9)
    assert torch.equal(out[valid].sort().values, draws[valid].sort().values)
    assert torch.equal(out[~valid], draws[~valid])
    # official: the released code's gather, written out on the compacted valid rows
    off = rank_assign(draws, cos_y, valid, "official")
    cv, dv = cos_y[valid], draws[valid]
    idx = torch.sort(cv, descending=True).indices
    expected = torch.sort(dv).values[idx]
    assert torch.equal(off[valid], expected)


def test_plus_head_assigns_largest_margin_to_hardest_sample():
    cos, labels, _ = _batch(B=256)
    head = build_head("elastic_arc", plus=True, seed=0)
    margins = head.logits(cos, labels)[1].margins
    cos_y = cos[torch.arange(256), labels]
    assert _spearman(margins, cos_y) == pytest.approx(-1.0, abs=1e-9)
    head_off = build_head("elastic_arc", plus=True, plus_assignment="official", seed=0)
    assert abs(_spearman(head_off.logits(cos, labels)[1].margins, cos_y)) < 0.25


def test_global_rank_scope_falls_back_to_local_without_process_group():
    cos, labels, _ = _batch(B=64)
    a = build_head("elastic_arc", plus=True, seed=3, rank_scope="global")(cos, labels)
    b = build_head("elastic_arc", plus=True, seed=3, rank_scope="local")(cos, labels)
    assert torch.equal(a, b)


def _global_worker(rank: int, world: int, port: int, q) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(100 + rank)
    cos = torch.rand(32, 10, generator=g) * 2 - 1
    labels = torch.randint(0, 10, (32,), generator=g)
    labels[rank] = -1
    head = build_head("elastic_arc", plus=True, seed=5, rank_scope="global")
    margins = head.logits(cos, labels)[1].margins
    cos_y = cos[torch.arange(32), labels.clamp(min=0)]
    q.put((rank, cos_y.tolist(), (labels >= 0).tolist(), margins.tolist()))
    dist.destroy_process_group()


@pytest.mark.slow
def test_global_rank_scope_ranks_over_all_ranks():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_global_worker, args=(r, 2, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    cos_y = torch.tensor([v for r in res for v in r[1]])
    valid = torch.tensor([v for r in res for v in r[2]])
    margins = torch.tensor([v for r in res for v in r[3]])
    assert valid.sum() == 62
    assert _spearman(margins[valid], cos_y[valid]) == pytest.approx(-1.0, abs=1e-9)


# ---------------------------------------------------------------------------------------------------
# stateful heads
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,buffers",
    [
        ("adacos", ["scale"]),
        ("curricularface", ["t"]),
        ("adaface", ["batch_mean", "batch_std"]),
        ("sphereface", ["it"]),
    ],
)
def test_state_lives_in_buffers_and_round_trips(name, buffers):
    head = build_head(name).train()
    cos, labels, norms = _batch(B=64, C=50)
    before = {b: getattr(head, b).clone() for b in buffers}
    for _ in range(3):
        head(cos, labels, norms if head.needs_norms else None)
    sd = head.state_dict()
    for b in buffers:
        assert b in sd
        assert not torch.equal(sd[b], before[b]) or (name == "adacos" and torch.isnan(before[b]))
    fresh = build_head(name)
    fresh.load_state_dict(sd)
    n = norms if head.needs_norms else None
    assert torch.equal(fresh(cos, labels, n), head(cos, labels, n))
    assert torch.equal(fresh(cos), head(cos))


def test_adacos_fixed_and_dynamic_scale():
    cos, labels, _ = _batch(B=64, C=1000)
    fixed = build_head("adacos_fixed")
    torch.testing.assert_close(fixed(cos, labels), cos * math.sqrt(2) * math.log(999))
    dyn = build_head("adacos", num_classes=1000)
    dyn(cos, labels)
    assert torch.isfinite(dyn.scale) and dyn.scale.item() != pytest.approx(math.sqrt(2) * math.log(999))


def test_eval_mode_does_not_update_state():
    cos, labels, norms = _batch()
    for name in ["adacos", "curricularface", "adaface", "sphereface"]:
        head = build_head(name).eval()
        sd = {k: v.clone() for k, v in head.state_dict().items()}
        head(cos, labels, norms)
        for k, v in head.state_dict().items():
            assert torch.equal(v, sd[k]) or (torch.isnan(v).all() and torch.isnan(sd[k]).all())


# ---------------------------------------------------------------------------------------------------
# Hydra configs
# ---------------------------------------------------------------------------------------------------
def test_build_head_takes_its_paper_defaults_and_overrides():
    """build_head builds the registry's paper defaults, and overrides win over them."""
    plus = build_head("elastic_arc_plus")
    assert (plus.m, plus.s, plus.sigma, plus.plus) == (0.5, 64.0, 0.0175, True)
    assert build_head("elastic_cos_plus").sigma == 0.025
    assert build_head("elastic_arc_plus", sigma=0.05, m=0.45).sigma == 0.05
    assert build_head("subcenter_arcface", k=2).k == 2
    assert build_head("subcenter_magface", k=2).k == 2  # no config of its own: wraps magface


def test_hydra_override_of_sigma_reaches_the_head(tmp_path):
    """A primary config of the user's own picks from the head group the commands register (cli/head_group.py)."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from elasticface.cli.resolvers import register_config_code

    register_config_code()
    (tmp_path / "primary.yaml").write_text(
        "defaults:\n  - _self_\n  - head: elastic_arc\n"
        "m: 0.5\ns: 64.0\nsigma: 0.05\nseed: 42\n"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = compose("primary", overrides=["head=elastic_arc_plus"])
        assert cfg.sigma == 0.0175 and cfg.model.head.sigma == 0.0175 and instantiate(cfg.model.head).plus
        cfg = compose("primary", overrides=["head=elastic_arc_plus", "sigma=0.02"])
        head = instantiate(cfg.model.head)
        assert head.sigma == 0.02 and head.plus and head.plus_assignment == "paper"
        cfg = compose("primary", overrides=["head=subcenter_arcface", "m=0.45"])
        head = instantiate(cfg.model.head)
        assert isinstance(head, SubCenter) and head.k == 3 and head.base.m == 0.45


# ---------------------------------------------------------------------------------------------------
# the benchmark script runs and reports ratios against arcface
# ---------------------------------------------------------------------------------------------------
def test_bench_heads_smoke(capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_heads.py"
    spec = importlib.util.spec_from_file_location("bench_heads", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--classes", "300", "--batch", "32", "--repeats", "1", "--warmup", "0",
                     "--heads", "elastic_arc_plus", "subcenter_arcface", "magface", "softmax"])  # fmt: skip
    assert [r["head"] for r in rows][0] == "arcface" and rows[0]["time_ratio"] == 1.0
    assert "time ratio" in capsys.readouterr().out
    rows = mod.main(["--classes", "300", "--batch", "32", "--dim", "16", "--repeats", "1", "--warmup", "0",
                     "--with-fc", "--heads", "adaface"])  # fmt: skip
    assert len(rows) == 2
