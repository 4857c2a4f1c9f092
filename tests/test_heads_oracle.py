"""Heads against independent references: a float64 per-sample loop oracle written with ``math``,
pytorch-metric-learning's losses, gradcheck, guard monotonicity, and mixed precision."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from elasticface.heads import SubCenter, build_head, head_names
from elasticface.heads.functional import margin_target

#: every head option that is not a sub-centre wrapper
BASE_HEADS = [n for n in head_names() if not n.startswith("subcenter_")]

PI = math.pi


# ---------------------------------------------------------------------------------------------------
# The oracle: one row at a time, python floats, formulas straight from the papers.
# ---------------------------------------------------------------------------------------------------
def g_target(c: float, m1: float = 1.0, m2: float = 0.0, m3: float = 0.0, guard: str = "none") -> float:
    """cos(m1·θ + m2) - m3 with the named guard, for one target cosine."""
    c = min(1.0, max(-1.0, c))
    th = math.acos(c)
    phi = m1 * th + m2
    if guard == "none":
        return math.cos(phi) - m3
    if guard == "easy":
        return math.cos(phi) - m3 if c > 0 else c
    if guard == "thmm":
        return math.cos(phi) - m3 if phi <= PI else c - m3 - m2 * math.sin(m2)
    if guard == "clip":
        return math.cos(min(PI, max(0.0, phi))) - m3
    if guard == "continuous":
        k = math.floor(phi / PI)
        return (-1) ** k * math.cos(phi) - 2 * k - m3
    raise AssertionError(guard)


def oracle(
    name: str, head, cos: torch.Tensor, labels: torch.Tensor, norms: torch.Tensor | None, state: dict,
    margins: torch.Tensor | None,
):
    """Expected logits of ``head`` (a fresh one of ``name``), row by row; ``state`` holds pre-step buffers."""
    B, C = cos.shape
    rows = cos.tolist()
    ys = labels.tolist()
    out = [[0.0] * C for _ in range(B)]
    valid = [y >= 0 for y in ys]
    s = getattr(head, "s", None)
    if name.startswith("subcenter_"):
        k = head.k
        rows = [[max(r[c * k : (c + 1) * k]) for c in range(C // k)] for r in rows]
        C = C // k
        out = [[0.0] * C for _ in range(B)]
        name, head, s = name[len("subcenter_") :], head.base, head.base.s
    margins = [m for m, y in zip(margins.tolist(), labels.tolist()) if y >= 0] if margins is not None else None
    mi = iter(margins) if margins is not None else None

    # batch-level statistics first (heads whose state update precedes the logits)
    if name == "adacos":
        s_old = state["s"]
        nt = [sum(math.exp(s_old * r[j]) for j in range(C) if j != y) for r, y, v in zip(rows, ys, valid) if v]
        ths = sorted(math.acos(r[y]) for r, y, v in zip(rows, ys, valid) if v)
        n = len(ths)
        med = ths[n // 2] if n % 2 else ths[n // 2 - 1]  # torch.nanmedian returns the lower median
        s = math.log(sum(nt) / n) / math.cos(min(PI / 4, med))
    if name == "adacos_fixed":
        s = math.sqrt(2) * math.log(C - 1)  # the paper's fixed scale
    if name == "curricularface":
        vals = [r[y] for r, y, v in zip(rows, ys, valid) if v]
        t = 0.01 * sum(vals) / len(vals) + 0.99 * state["t"]
    if name == "adaface":
        ns = [min(100.0, max(0.001, a)) for a in norms.tolist()]
        mu = sum(ns) / len(ns)
        sd = math.sqrt(sum((a - mu) ** 2 for a in ns) / (len(ns) - 1))
        bm = 0.01 * mu + 0.99 * state["mean"]
        bs = 0.01 * sd + 0.99 * state["std"]
    if name == "sphereface":
        lam = max(5.0, 1000.0 / (1 + 0.12 * state["it"]))

    for i, (r, y) in enumerate(zip(rows, ys)):
        def neg(c: float) -> float:
            return c * s

        tgt = None
        if name == "softmax":
            neg = lambda c: c  # noqa: E731
        elif name == "li_arcface":
            neg = lambda c: s * (PI - 2 * math.acos(c)) / PI  # noqa: E731
            tgt = lambda c: s * (PI - 2 * (math.acos(c) + head.m)) / PI  # noqa: E731
        elif name == "circle":
            neg = lambda c: s * max(c + head.m, 0.0) * (c - head.m)  # noqa: E731
            tgt = lambda c: s * max(1 + head.m - c, 0.0) * (c - 1 + head.m)  # noqa: E731
        elif name == "cosface":
            tgt = lambda c: s * (c - head.m)  # noqa: E731
        elif name == "arcface":
            tgt = lambda c: s * g_target(c, m2=head.m, guard="thmm")  # noqa: E731
        elif name == "combined":
            tgt = lambda c: s * g_target(c, 1.0, 0.3, 0.2, "continuous")  # noqa: E731
        elif name == "sphereface":
            tgt = lambda c: s * (lam * c + g_target(c, m1=4.0, guard="continuous")) / (1 + lam)  # noqa: E731
        elif name.startswith("elastic_"):
            if valid[i]:
                mrg = next(mi)
                if name.startswith("elastic_arc"):
                    tgt = lambda c: s * g_target(c, m2=mrg, guard="thmm")  # noqa: E731
                else:
                    tgt = lambda c: s * (c - mrg)  # noqa: E731
        elif name == "magface":
            a = min(110.0, max(10.0, norms[i].item()))
            ma = 0.45 + (0.8 - 0.45) * (a - 10) / 100
            tgt = lambda c: s * g_target(c, m2=ma, guard="thmm")  # noqa: E731
        elif name == "adaface":
            z = min(1.0, max(-1.0, (ns[i] - bm) / (bs + 1e-3) * 0.333))
            tgt = lambda c: s * g_target(c, m2=-0.4 * z, m3=0.4 + 0.4 * z, guard="clip")  # noqa: E731
        elif name == "curricularface" and valid[i]:
            ctm = math.cos(math.acos(r[y]) + head.m)
            neg = lambda c: s * (c * (t + c) if c > ctm else c)  # noqa: E731
            tgt = lambda c: s * g_target(c, m2=head.m, guard="thmm")  # noqa: E731
        elif name == "mv_softmax" and valid[i]:
            ft = r[y] - head.m
            neg = lambda c: s * ((head.t + 1) * c + head.t if c > ft else c)  # noqa: E731
            tgt = lambda c: s * (c - head.m)  # noqa: E731
        # normface, adacos: no target change
        for j in range(C):
            out[i][j] = tgt(r[j]) if (valid[i] and j == y and tgt is not None) else neg(r[j])
    return torch.tensor(out, dtype=torch.float64)


def sweep_batch(C: int = 7, k: int = 1, seed: int = 0):
    """Target angles sweeping [0, π] (endpoints exact, θ + m > π covered), random negatives, one -1 row."""
    g = torch.Generator().manual_seed(seed)
    thetas = torch.linspace(0, PI, 31, dtype=torch.float64)
    B = thetas.numel() + 1
    cos = torch.rand(B, C * k, generator=g, dtype=torch.float64) * 1.6 - 0.8
    labels = torch.randint(0, C, (B,), generator=g)
    labels[-1] = -1
    tc = torch.cos(thetas)
    tc[0], tc[-1] = 1.0, -1.0
    for i in range(B - 1):
        # every sub-centre of the target class at or below the swept one, one of them equal to it
        cols = slice(labels[i] * k, (labels[i] + 1) * k)
        cos[i, cols] = torch.minimum(cos[i, cols], tc[i])
        cos[i, labels[i] * k + (i % k)] = tc[i]
    norms = torch.rand(B, generator=g, dtype=torch.float64) * 130 + 1
    return cos, labels, norms


ORACLE_NAMES = BASE_HEADS + ["subcenter_arcface", "subcenter_elastic_arc_plus", "subcenter_magface"]


@pytest.mark.parametrize("name", ORACLE_NAMES)
def test_loop_oracle_float64(name):
    head = build_head(name, **({"seed": 3} if "elastic" in name else {})).double().train()
    inner = head.base if isinstance(head, SubCenter) else head
    k = getattr(head, "k", 1)
    for step in range(3):  # several steps, so the stateful heads' updates are checked too
        cos, labels, norms = sweep_batch(k=k, seed=step)
        state = {
            "s": float(getattr(inner, "scale", torch.tensor(math.nan))),
            "t": float(getattr(inner, "t", torch.tensor(0.0))) if name == "curricularface" else 0.0,
            "mean": float(getattr(inner, "batch_mean", torch.tensor(0.0))),
            "std": float(getattr(inner, "batch_std", torch.tensor(0.0))),
            "it": int(getattr(inner, "it", torch.tensor(0))),
        }
        if name == "adacos" and math.isnan(state["s"]):
            state["s"] = math.sqrt(2) * math.log(cos.shape[1] - 1)
        out, plan = head.logits(cos, labels, norms if head.needs_norms else None)
        assert out.dtype == torch.float64 and out.shape == (cos.shape[0], cos.shape[1] // k)
        want = oracle(name, head, cos, labels, norms, state, plan.margins)
        torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9 * max(1.0, head.s or 1.0))


@pytest.mark.parametrize("guard", ["none", "easy", "thmm", "clip", "continuous"])
@pytest.mark.parametrize(
    "m1,m2,m3", [(1.0, 0.5, 0.0), (1.0, 1.2, 0.1), (1.35, 0.25, 0.2), (4.0, 0.0, 0.0), (1.0, -0.3, 0.1)]
)
@pytest.mark.parametrize("per_sample", [False, True])
def test_margin_target_matches_oracle_for_every_guard(guard, m1, m2, m3, per_sample):
    theta = torch.linspace(0, PI, 61, dtype=torch.float64)
    c = torch.cos(theta)
    c[0], c[-1] = 1.0, -1.0
    if per_sample:  # per-sample margins: jitter each sample's m2 and m3 around the given values
        g = torch.Generator().manual_seed(0)
        m2s = m2 + 0.05 * torch.randn(61, generator=g, dtype=torch.float64)
        m3s = m3 + 0.05 * torch.randn(61, generator=g, dtype=torch.float64)
        got = margin_target(c, m1, m2s, m3s, guard)
        want = [g_target(ci, m1, a, b, guard) for ci, a, b in zip(c.tolist(), m2s.tolist(), m3s.tolist())]
    else:
        got = margin_target(c, m1, m2, m3, guard)
        want = [g_target(ci, m1, m2, m3, guard) for ci in c.tolist()]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_magface_aux_loss_matches_oracle():
    head = build_head("magface").double()
    cos, labels, norms = sweep_batch()
    aux = head.logits(cos, labels, norms)[1].aux_loss
    a = [min(110.0, max(10.0, x)) for x, y in zip(norms.tolist(), labels.tolist()) if y >= 0]
    want = 35.0 * sum(x / 110.0**2 + 1 / x for x in a) / len(a)
    assert aux.item() == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------------------------------------
# Differential tests against pytorch-metric-learning (loss and gradients, float64)
# ---------------------------------------------------------------------------------------------------
pml_losses = pytest.importorskip("pytorch_metric_learning.losses")


def _embeddings_at_angles(W: torch.Tensor, labels: torch.Tensor, thetas: torch.Tensor, g) -> torch.Tensor:
    """Unit embeddings at exactly ``thetas`` from their class centre (columns of W)."""
    w = F.normalize(W[:, labels].T, dim=1)
    u = torch.randn(w.shape, generator=g, dtype=W.dtype)
    u = F.normalize(u - (u * w).sum(1, keepdim=True) * w, dim=1)
    return torch.cos(thetas)[:, None] * w + torch.sin(thetas)[:, None] * u


@pytest.mark.parametrize(
    "kind,k", [("arcface", 1), ("cosface", 1), ("subcenter_arcface", 3), ("subcenter_arcface", 2)]
)
def test_against_pytorch_metric_learning(kind, k):
    g = torch.Generator().manual_seed(1)
    B, D, C, m, s = 24, 16, 11, 0.5 if "arc" in kind else 0.35, 64.0
    W = torch.randn(D, C * k, generator=g, dtype=torch.float64)
    labels = torch.randint(0, C, (B,), generator=g)
    # angles both sides of π - m (thmm branch), avoiding exactly 0 and π where pml's acos has no gradient
    thetas = torch.linspace(0.05, PI - 0.05, B, dtype=torch.float64)
    emb = _embeddings_at_angles(W.view(D, C, k)[:, :, 0], labels, thetas, g) * 3.0
    if kind == "arcface":
        ref = pml_losses.ArcFaceLoss(num_classes=C, embedding_size=D, margin=math.degrees(m), scale=s)
        ours = build_head("arcface", s=s, m=m)
    elif kind == "cosface":
        ref = pml_losses.CosFaceLoss(num_classes=C, embedding_size=D, margin=m, scale=s)
        ours = build_head("cosface", s=s, m=m)
    else:
        ref = pml_losses.SubCenterArcFaceLoss(
            num_classes=C, embedding_size=D, margin=math.degrees(m), scale=s, sub_centers=k
        )
        ours = build_head("subcenter_arcface", s=s, m=m, k=k)
    ref.W.data = W.clone()
    e1 = emb.clone().requires_grad_()
    loss_ref = ref(e1, labels)
    loss_ref.backward()

    e2 = emb.clone().requires_grad_()
    W2 = W.clone().requires_grad_()
    cos = F.normalize(e2, dim=1) @ F.normalize(W2, dim=0)
    loss = F.cross_entropy(ours(cos, labels), labels)
    loss.backward()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(e2.grad, e1.grad, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(W2.grad, ref.W.grad, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------------------------------------
# gradcheck at interior points
# ---------------------------------------------------------------------------------------------------
GRADCHECK_NAMES = [n for n in BASE_HEADS if n != "circle"] + ["subcenter_cosface"]


@pytest.mark.parametrize("name", GRADCHECK_NAMES)
def test_gradcheck_interior(name):
    """Exact-gradient heads against finite differences (Circle's weights are detached by design)."""
    kwargs = {"seed": 0} if "elastic" in name else {}
    head = build_head(name, **kwargs).double().eval()  # eval: no state updates between gradcheck calls
    k = getattr(head, "k", 1)
    g = torch.Generator().manual_seed(5)
    B, C = 5, 6
    cos = (torch.rand(B, C * k, generator=g, dtype=torch.float64) * 1.6 - 0.8).requires_grad_()
    labels = torch.tensor([0, 2, -1, 5, 3])
    norms = torch.rand(B, generator=g, dtype=torch.float64) * 80 + 15
    norms.requires_grad_("magface" in name)  # AdaFace detaches the norms by design

    def fn(c, n):
        if hasattr(head, "step"):
            head.step = 0
        elif hasattr(head, "base") and hasattr(head.base, "step"):
            head.base.step = 0
        out, plan = head.logits(c, labels, n if head.needs_norms else None)
        return out if plan.aux_loss is None else (out, plan.aux_loss)

    assert torch.autograd.gradcheck(fn, (cos, norms), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_circle_gradient_treats_weights_as_constants():
    head = build_head("circle").double()
    cos = torch.tensor([[0.3, -0.1, 0.5]], dtype=torch.float64, requires_grad=True)
    head(cos, torch.tensor([0])).sum().backward()
    s, m = head.s, head.m
    want = torch.tensor([[s * (1 + m - 0.3), s * (-0.1 + m), s * (0.5 + m)]], dtype=torch.float64)
    torch.testing.assert_close(cos.grad, want)


def test_magface_margin_is_differentiable_through_norm():
    head = build_head("magface").double()
    cos = torch.full((2, 3), 0.2, dtype=torch.float64)
    cos[:, 0] = 0.6
    norms = torch.tensor([30.0, 50.0], dtype=torch.float64, requires_grad=True)
    head(cos, torch.tensor([0, 0]), norms)[:, 0].sum().backward()
    assert (norms.grad < 0).all()  # larger norm -> larger margin -> smaller target logit


# ---------------------------------------------------------------------------------------------------
# guards: monotone target where promised
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "guard,m1,m2,m3",
    [
        ("thmm", 1.0, 0.3, 0.0),
        ("thmm", 1.0, 0.5, 0.1),
        ("thmm", 1.0, 1.2, 0.0),
        ("clip", 1.0, 0.5, 0.2),
        ("clip", 1.0, -0.3, 0.0),
        ("continuous", 1.0, 0.5, 0.0),
        ("continuous", 1.35, 0.3, 0.2),
        ("continuous", 4.0, 0.0, 0.0),
    ],
)
def test_guard_monotone_in_theta(guard, m1, m2, m3):
    theta = torch.linspace(0, PI, 20001, dtype=torch.float64)
    t = margin_target(torch.cos(theta), m1, m2, m3, guard)
    assert (t[1:] - t[:-1] <= 1e-12).all()
    if guard == "continuous":
        assert (t[1:] - t[:-1] < 0).all()  # strictly


def test_unguarded_target_is_not_monotone():
    theta = torch.linspace(0, PI, 2001, dtype=torch.float64)
    t = margin_target(torch.cos(theta), 1.0, 0.5, 0.0, "none")
    assert (t[1:] > t[:-1]).any()


def test_straight_through_value_equals_exact_and_gradient_is_identity():
    c = torch.linspace(-0.99, 0.99, 50, dtype=torch.float64, requires_grad=True)
    exact = margin_target(c, 1.0, 0.5, 0.0, "thmm", "exact")
    st = margin_target(c, 1.0, 0.5, 0.0, "thmm", "straight_through")
    torch.testing.assert_close(st, exact)
    (grad,) = torch.autograd.grad(st.sum(), c)
    assert torch.equal(grad, torch.ones_like(grad))


# ---------------------------------------------------------------------------------------------------
# numerics: exact coincidence with the centre or its opposite; mixed precision
# ---------------------------------------------------------------------------------------------------
def _coincident_batch(dtype=torch.float32, C: int = 9, k: int = 1):
    g = torch.Generator().manual_seed(2)
    D = 8
    W = F.normalize(torch.randn(C * k, D, generator=g), dim=1)
    labels = torch.tensor([0, 1, 2, 3, 4, 5, -1, 7])
    rows = labels.clamp(min=0) * k
    emb = torch.randn(labels.numel(), D, generator=g)
    emb[0] = W[rows[0]] * 5  # exactly on its class centre
    emb[1] = -W[rows[1]] * 5  # exactly opposite
    emb[2] = W[rows[2]] * 1e-3
    emb[3] = -W[rows[3]]
    return emb, W, labels


@pytest.mark.parametrize("name", BASE_HEADS + ["subcenter_arcface"])
@pytest.mark.parametrize("s", [64.0, 128.0])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_finite_at_coincidence_under_mixed_precision(name, s, precision):
    kwargs = {"s": s} if build_head(name).s is not None else {}
    head = build_head(name, **kwargs).train()
    k = getattr(head, "k", 1)
    emb, W, labels = _coincident_batch(k=k)
    emb = emb.requires_grad_()
    W = W.requires_grad_()
    if precision == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            e = F.normalize(emb, dim=1) if head.normalized else emb
            cos = F.linear(e, W)
            assert cos.dtype == torch.bfloat16
            logits, plan = head.logits(cos, labels, emb.norm(dim=1) if head.needs_norms else None)
            loss = F.cross_entropy(logits, labels.clamp(min=0))
    else:
        e = F.normalize(emb, dim=1) if head.normalized else emb
        cos = F.linear(e, W)
        cos[0, labels[0] * k] = 1.0 + 1e-7  # rounding past the valid range must be harmless
        if precision == "fp16":
            cos = cos.half()
        logits, plan = head.logits(cos, labels, emb.norm(dim=1) if head.needs_norms else None)
        loss = F.cross_entropy(logits, labels.clamp(min=0))
    assert logits.dtype == torch.float32, "the head must compute in fp32"
    if plan.aux_loss is not None:
        loss = loss + plan.aux_loss
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(emb.grad).all() and torch.isfinite(W.grad).all()
