"""The class layer: the chunked margin cross-entropy against the dense oracle for every head.

The oracle is written here, independently of the classifier: ``F.linear`` of the normalised embeddings
and centres -> the head's dense ``(cos, labels, norms) -> logits`` form -> ``F.cross_entropy``. The
chunked path never builds those logits; both must give the same loss, embedding gradient, centre
gradient and head state (margins drawn, EMA buffers) to 1e-5 relative.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from elasticface.classifier import Classifier, FullFC, PartialFC, nontarget_lse
from elasticface.heads import build_head, head_names

C, D, B = 11, 6, 9
SEEDED = {"seed": 5}  # the Elastic heads' margin stream


def _build(name: str):
    kwargs = SEEDED if "elastic" in name else {}
    return build_head(name, **kwargs).train()


def _inputs(name: str, k: int, dtype=torch.float32, extreme: bool = True):
    g = torch.Generator().manual_seed(len(name))
    scale = 12.0 if name in ("magface", "adaface") else 1.0  # MagFace's norms live in [10, 110]
    emb = torch.randn(B, D, generator=g, dtype=torch.float64) * scale
    weight = torch.randn(C * k, D, generator=g, dtype=torch.float64)
    labels = torch.randint(0, C, (B,), generator=g)
    labels[4] = -1  # no class: no loss, no statistic
    if extreme:  # cos = +1 and -1 exactly: an embedding on its centre, one opposite its centre, one on a non-target
        weight[2 * k] = 0.0
        weight[2 * k, 0] = 3.0
        emb[0] = 0.0
        emb[0, 0] = 5.0 * scale
        labels[0] = 2
        weight[5 * k] = 0.0
        weight[5 * k, 1] = 2.0
        emb[1] = 0.0
        emb[1, 1] = -7.0 * scale
        labels[1] = 5
        emb[2] = weight[2 * k] * 4.0  # cos = 1 with class 2, which is not its label
        labels[2] = 7
    return emb.to(dtype), weight.to(dtype), labels


def dense_oracle(head, emb, weight, labels, normalize=True):
    """Loss and gradients of the dense path: cosines [B, C] -> head logits -> cross-entropy."""
    emb = emb.clone().requires_grad_(True)
    weight = weight.clone().requires_grad_(True)
    cos = F.linear(F.normalize(emb, dim=1), F.normalize(weight, dim=1)).clamp(-1, 1) if normalize else emb @ weight.T
    norms = emb.norm(dim=1) if head.needs_norms else None
    logits, plan = head.logits(cos, labels, norms)
    loss = F.cross_entropy(logits, labels, ignore_index=-1)
    if plan.aux_loss is not None:
        loss = loss + plan.aux_loss
    loss.backward()
    return loss.detach(), emb.grad, weight.grad, plan


def chunked(head, emb, weight, labels, chunk_size, sample_rate=None):
    k = head.centers_per_class
    if sample_rate is None:
        layer = FullFC(D, C, centers_per_class=k, normalize=head.normalized)
    else:
        layer = PartialFC(D, C, sample_rate=sample_rate, centers_per_class=k, normalize=head.normalized)
    layer = layer.to(weight.dtype)
    layer.weight.data.copy_(weight)
    classifier = Classifier(layer, head, chunk_size=chunk_size, path="chunked")
    emb = emb.clone().requires_grad_(True)
    out = classifier(emb, labels)
    out.loss.backward()
    return out, emb.grad, layer.weight.grad


def rel(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def _state(head):
    return {k: v.clone() for k, v in head.state_dict().items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("name", head_names())
def test_chunked_equals_dense_for_every_head(name):
    probe = _build(name)
    k = probe.centers_per_class
    emb, weight, labels = _inputs(name, k)
    for chunk_size in (1, 4, C):
        head_d, head_c = _build(name), _build(name)
        loss_d, ge_d, gw_d, plan_d = dense_oracle(head_d, emb, weight, labels, head_d.normalized)
        out, ge_c, gw_c = chunked(head_c, emb, weight, labels, chunk_size)
        assert out.loss.dtype == torch.float32
        where = (name, chunk_size)
        assert rel(out.loss, loss_d) < 1e-5, where
        assert rel(ge_c, ge_d) < 1e-5, where
        assert rel(gw_c, gw_d) < 1e-5, where
        for key, value in _state(head_d).items():  # AdaCos's scale, CurricularFace's t, AdaFace's EMA, ...
            torch.testing.assert_close(
                _state(head_c)[key], value, rtol=1e-5, atol=1e-6, equal_nan=True, msg=f"{name}: {key}"
            )
        if plan_d.margins is not None:
            torch.testing.assert_close(out.margins, plan_d.margins)


# Circle is left out: its weights α are detached by design, so its gradient is not the loss's derivative.
@pytest.mark.parametrize(
    "name",
    [
        "arcface",
        "cosface",
        "combined",
        "sphereface",
        "mv_softmax",
        "li_arcface",
        "magface",
        "subcenter_arcface",
        "softmax",
        "adacos_fixed",
    ],
)
def test_chunked_gradcheck_float64(name):
    """Loss and gradients of the chunked path in float64 against finite differences (interior points)."""
    head = _build(name)
    if name == "sphereface":
        head.eval()  # its λ anneals with every training call; the loss must be one function for gradcheck
    k = head.centers_per_class
    emb, weight, labels = _inputs(name, k, torch.float64, extreme=False)
    layer = FullFC(D, C, centers_per_class=k, normalize=head.normalized).double()
    del layer.weight  # a plain tensor instead, so gradcheck's perturbations reach the centres
    classifier = Classifier(layer, head, chunk_size=3, path="chunked")

    def loss(e, w):
        layer.weight = w
        return classifier(e, labels).loss

    e = emb.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(loss, (e, w), eps=1e-6, atol=1e-6, rtol=1e-5)
    # and float64 agrees with the dense oracle to rounding
    loss_d, ge_d, gw_d, _ = dense_oracle(copy.deepcopy(head), emb, weight, labels, head.normalized)
    e.grad = w.grad = None
    value = loss(e, w)
    value.backward()
    assert rel(value.detach(), loss_d) < 1e-12 and rel(e.grad, ge_d) < 1e-10 and rel(w.grad, gw_d) < 1e-10


@pytest.mark.parametrize("name", ["arcface", "elastic_arc_plus", "subcenter_cosface", "curricularface"])
def test_partial_fc_sampling_chunked_equals_dense(name):
    """Partial FC: the same sampled classes (same RNG) give the same loss and gradients on both paths."""
    k = _build(name).centers_per_class
    emb, weight, labels = _inputs(name, k, extreme=False)
    results = {}
    for path in ("dense", "chunked"):
        layer = PartialFC(D, C, sample_rate=0.5, centers_per_class=k)
        layer.weight.data.copy_(weight)
        classifier = Classifier(layer, _build(name), chunk_size=2, path=path)
        e = emb.clone().requires_grad_(True)
        torch.manual_seed(3)
        out = classifier(e, labels)
        out.loss.backward()
        results[path] = (out.loss.detach(), e.grad, layer.weight.grad, layer.last_sampled_classes)
    (ld, ged, gwd, cd), (lc, gec, gwc, cc) = results["dense"], results["chunked"]
    assert torch.equal(cd, cc) and cc.numel() < C  # it did sample, the same classes
    assert rel(lc, ld) < 1e-5 and rel(gec, ged) < 1e-5 and rel(gwc, gwd) < 1e-5
    untouched = torch.ones(C, dtype=torch.bool)
    untouched[cc] = False
    assert gwc.view(C, k, D)[untouched].abs().max() == 0  # classes not sampled get no gradient


@pytest.mark.parametrize("path", ["chunked", "dense"])
def test_partial_fc_chunked_reads_the_sampled_rows_in_place(path):
    """The chunked path reads Partial FC's sampled rows from the centres chunk by chunk and writes their gradient
    into the centres' own: no gathered [S, D] copy and no gradient of one (at 2M classes, rate 0.1: 390 MiB
    each). The dense path, which makes both, shows that the count sees them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    classes, dim, sample = 64, 8, 32
    made: dict[tuple[int, ...], set[int]] = {}  # shape -> the storages ops returned with it (views counted once)

    class Storages(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    made.setdefault(tuple(t.shape), set()).add(t.untyped_storage().data_ptr())
            return out

    torch.manual_seed(0)
    layer = PartialFC(dim, classes, sample_rate=sample / classes)
    classifier = Classifier(layer, _build("arcface"), chunk_size=8, path=path)
    emb, labels = torch.randn(6, dim, requires_grad=True), torch.randint(0, classes, (6,))
    with Storages():
        classifier(emb, labels).loss.backward()
    assert layer.last_sampled_classes.numel() == sample
    gathered = len(made.get((sample, dim), ()))
    if path == "dense":
        assert gathered >= 2
        return
    assert gathered == 0
    full = made[(classes, dim)] - {layer.weight.untyped_storage().data_ptr()}
    assert full == {layer.weight.grad.untyped_storage().data_ptr()}  # the centres' gradient, made once

def test_autocast_bf16_keeps_cosines_and_reduction_in_fp32():
    head = _build("arcface")
    emb, weight, labels = _inputs("arcface", 1, extreme=False)
    layer = FullFC(D, C)
    layer.weight.data.copy_(weight)
    classifier = Classifier(layer, head, chunk_size=4, path="chunked")
    emb_bf16 = emb.bfloat16().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = classifier(emb_bf16, labels)
    out.loss.backward()
    assert out.loss.dtype == torch.float32 and layer.weight.grad.dtype == torch.float32
    grad_w_autocast = layer.weight.grad.clone()
    layer.weight.grad = None
    # the same inputs, rounded to bf16, computed in fp32 without autocast: identical arithmetic
    loss_d, ge_d, gw_d, _ = dense_oracle(_build("arcface"), emb_bf16.detach().float(), weight, labels)
    assert rel(out.loss.detach(), loss_d) < 1e-5
    assert rel(grad_w_autocast, gw_d) < 1e-5 and rel(emb_bf16.grad.float(), ge_d) < 1e-2  # bf16 grad storage


def test_nontarget_lse_is_the_logsumexp_without_the_target_column():
    g = torch.Generator().manual_seed(0)
    x = F.normalize(torch.randn(5, 4, generator=g, dtype=torch.float64), dim=1)
    w = torch.randn(7, 4, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 6, -1, 3, 3])
    got = nontarget_lse(x, w, labels, lambda c: 10 * c, chunk=2)
    cos = x @ F.normalize(w, dim=1).T
    for i, y in enumerate(labels.tolist()):
        cols = [j for j in range(7) if j != y]
        assert abs(got[i].item() - torch.logsumexp(10 * cos[i, cols], 0).item()) < 1e-12
    # one class only, and it is the target: no non-target class, LSE = -inf, loss = 0, finite gradient
    head = _build("arcface")
    layer = FullFC(4, 1)
    classifier = Classifier(layer, head, path="chunked")
    e = torch.randn(3, 4, requires_grad=True)
    out = classifier(e, torch.zeros(3, dtype=torch.long))
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.isfinite(e.grad).all() and torch.isfinite(layer.weight.grad).all()


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_chunk_size_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises(ValueError, match=rf"chunk_size={bad!r}: must be a positive integer \(classes per chunk\)"):
        Classifier(FullFC(D, C), _build("arcface"), chunk_size=bad)


def test_chunk_size_above_the_class_count_is_one_chunk():
    """A sweep over data sets keeps one chunk_size: above the class count it is one chunk, as chunk_size=C is."""
    torch.manual_seed(0)
    e, y = torch.randn(6, D), torch.randint(0, C, (6,))
    grads = []
    for chunk in (C, C + 1, 10**6):
        layer = FullFC(D, C)
        layer.weight.data.copy_(torch.randn(C, D, generator=torch.Generator().manual_seed(1)))
        out = Classifier(layer, _build("arcface"), chunk_size=chunk, path="chunked")(e, y)
        out.loss.backward()
        grads.append((out.loss.detach(), layer.weight.grad))
    for loss, grad in grads[1:]:
        assert torch.equal(loss, grads[0][0]) and torch.equal(grad, grads[0][1])


def test_unknown_path_is_refused():
    with pytest.raises(ValueError, match=r"classifier path='sparse': must be one of \['auto', 'chunked', 'dense'\]"):
        Classifier(FullFC(D, C), _build("arcface"), path="sparse")


# the heads whose chunked step measured at most 1.05x the dense step (docs/class_layer.md): non-target
# logits s * cos. The others run autograd per chunk (or a second pass: dynamic AdaCos) and stay dense under auto.
MEASURED_AUTO_CHUNKED = {"adacos_fixed", "adaface", "arcface", "combined", "cosface", "elastic_arc",
                         "elastic_arc_plus", "elastic_cos", "elastic_cos_plus", "magface", "normface", "softmax",
                         "sphereface", "subcenter_arcface", "subcenter_cosface", "subcenter_elastic_arc_plus"}
MEASURED = MEASURED_AUTO_CHUNKED | {"adacos", "circle", "curricularface", "li_arcface", "mv_softmax"}


def _plan_is_fast_chunked(name: str) -> bool:
    """The rule behind those measurements, read from a head's plan: non-target logits `scale * cos` (the plan
    sets `scale`) and no extra pass over the classes (it never asks for the non-target log-sum-exp)."""
    asked = []
    cos_y = torch.rand(B) * 2 - 1

    def lse(fn, scale):
        asked.append(scale)
        return torch.zeros(B)

    plan = _build(name).plan(cos_y.requires_grad_(), torch.ones(B, dtype=torch.bool), torch.rand(B) * 20 + 5,
                             num_columns=C, nontarget_lse=lse)
    return plan.scale is not None and not asked


def test_the_measured_heads_follow_the_rule():
    assert {n for n in MEASURED if _plan_is_fast_chunked(n)} == MEASURED_AUTO_CHUNKED


@pytest.mark.parametrize("name", head_names())
def test_auto_path_is_chunked_where_it_is_as_fast_as_dense(name):
    head = _build(name)
    k = getattr(head, "centers_per_class", 1)
    layer = FullFC(D, C, centers_per_class=k)
    assert Classifier(layer, copy.deepcopy(head), chunk_size=C - 1).chunked == _plan_is_fast_chunked(name)
    assert Classifier(layer, copy.deepcopy(head), chunk_size=C - 1, path="chunked").chunked  # on request: all
    assert not Classifier(layer, copy.deepcopy(head)).chunked  # all classes in one chunk: dense, no recomputation
    assert not Classifier(layer, copy.deepcopy(head), chunk_size=C).chunked


def test_dense_path_is_the_oracle():
    head = _build("curricularface")
    emb, weight, labels = _inputs("curricularface", 1)
    layer = FullFC(D, C)
    layer.weight.data.copy_(weight)
    dense = Classifier(layer, copy.deepcopy(head), path="dense")
    assert not dense.chunked
    out = dense(emb, labels)
    loss_d, _, _, _ = dense_oracle(copy.deepcopy(head), emb, weight, labels)
    assert rel(out.loss.detach(), loss_d) < 1e-6
    # eval: the head's eval logits against every centre
    logits = Classifier(layer, head).eval()(emb)
    torch.testing.assert_close(logits, head(F.linear(F.normalize(emb), F.normalize(weight)).clamp(-1, 1)))


@pytest.mark.slow
def test_bench_classifier_runs_and_refuses_a_chunk_size_beyond_c():
    """benchmarks/bench_classifier.py at a tiny size: every path, each chunk size, ratios against dense."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_classifier

    rows = bench_classifier.main(
        ["--classes", "300", "--batch", "16", "--dim", "8", "--repeats", "1", "--warmup", "0", "--chunks", "64", "300"]
    )
    assert [(r["path"], r["chunk"]) for r in rows] == [
        ("released", None),
        ("dense", None),
        ("chunked", 64),
        ("chunked", 300),
    ]
    assert rows[1]["time_vs_dense"] == 1.0
    with pytest.raises(SystemExit, match=r"--chunks 301: a chunk size must be in \[1, --classes=300\]"):
        bench_classifier.main(["--classes", "300", "--chunks", "301"])
