"""The margin schedule (λ(step): how much of the head's margin a step applies) and the training signals that show
where a margin head stalls: checked against the rules written out here, not against the code's own."""

import csv
import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TINY
from elasticface.classifier import Classifier, FullFC
from elasticface.heads.registry import build_head
from elasticface.margin_schedule import MarginSchedule
from elasticface.training import run


def test_weight_follows_the_named_rule():
    warm = MarginSchedule("warmup", fraction=0.5)
    n = warm.length(100)
    assert n == 50 and [warm.weight(k, n) for k in (0, 25, 49, 50, 99)] == [0.0, 0.5, 49 / 50, 1.0, 1.0]
    assert MarginSchedule("warmup", steps=10, start=0.2).weight(5, 10) == pytest.approx(0.2 + 0.8 * 0.5)
    two_stage = MarginSchedule("softmax_start", steps=30)
    assert [two_stage.weight(k, two_stage.length(100)) for k in (0, 29, 30)] == [0.0, 0.0, 1.0]
    assert MarginSchedule().weight(0, 0) == 1.0 and MarginSchedule("none", fraction=0.5).length(100) == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "warmup", "steps": -5}, "margin_schedule.steps=-5: expected a whole number of optimizer steps >= 0"),
    ({"kind": "warmup", "fraction": 1.5}, "margin_schedule.fraction=1.5: expected a share of the run in [0, 1]"),
    ({"kind": "warmup", "fraction": 0.5, "start": -0.1}, "margin_schedule.start=-0.1: expected a margin weight"),
    ({"kind": "ramp", "fraction": 0.5}, "margin_schedule.kind='ramp': expected one of ['none', 'warmup', "),
    ({"kind": "warmup"}, "margin_schedule.kind=warmup: set margin_schedule.steps or margin_schedule.fraction"),
])
def test_impossible_schedules_are_named(kwargs, message):
    with pytest.raises(ValueError) as e:
        MarginSchedule(**kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_warmup_longer_than_the_run_is_refused():
    with pytest.raises(ValueError, match=r"^margin_schedule.steps=500: longer than the run \(120 optimizer steps\)"):
        MarginSchedule("warmup", steps=500).length(120)
    with pytest.raises(ValueError, match="margin_schedule.fraction=0.5: the run's length is unknown"):
        MarginSchedule("warmup", fraction=0.5).length(float("inf"))


def _loss_and_grad(head_name: str, weight: float, path: str, **head_args):
    torch.manual_seed(0)
    emb = torch.randn(16, 8, requires_grad=True)
    labels = torch.randint(0, 40, (16,))
    centers = FullFC(embedding_size=8, num_classes=40)  # float32 inside, as in training
    torch.nn.init.normal_(centers.weight, generator=torch.Generator().manual_seed(1))
    classifier = Classifier(centers, build_head(head_name, **head_args), chunk_size=16, path=path)
    out = classifier(emb, labels, margin_weight=weight)
    out.loss.backward()
    return out.loss.detach(), emb.grad, centers.weight.grad, emb.detach(), labels, centers.weight.detach()


def _reference_loss(emb, labels, weight_matrix, target_of_cos, s):
    """Cross-entropy over s·cos θ_j with the target column replaced, written out in float64 (the oracle)."""
    emb, weight_matrix = emb.double(), weight_matrix.double()
    cos = torch.nn.functional.normalize(emb, dim=1) @ torch.nn.functional.normalize(weight_matrix, dim=1).T
    logits = s * cos
    rows = torch.arange(len(labels))
    logits[rows, labels] = target_of_cos(cos[rows, labels])
    return torch.nn.functional.cross_entropy(logits, labels).float()


@pytest.mark.parametrize("path", ["dense", "chunked"])
def test_cosface_at_weight_lambda_is_cosface_with_lambda_m(path):
    """λ·s(cos - m) + (1 - λ)·s·cos = s(cos - λm): a CosFace margin of λ·m exactly."""
    loss, _, _, emb, labels, w = _loss_and_grad("cosface", 0.3, path, m=0.35, s=64.0)
    ref = _reference_loss(emb, labels, w, lambda c: 64.0 * (c - 0.3 * 0.35), 64.0)
    assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["dense", "chunked"])
def test_arcface_blends_its_target_with_the_margin_free_one(path):
    loss, _, _, emb, labels, w = _loss_and_grad("arcface", 0.25, path, m=0.5, s=64.0)
    ref = _reference_loss(emb, labels, w,
                          lambda c: 0.25 * 64.0 * torch.cos(torch.acos(c) + 0.5) + 0.75 * 64.0 * c, 64.0)
    assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-5)
    zero = _loss_and_grad("arcface", 0.0, path, m=0.5, s=64.0)[0]
    assert torch.allclose(zero, _reference_loss(emb, labels, w, lambda c: 64.0 * c, 64.0), rtol=1e-5, atol=1e-5)


def test_dense_and_chunked_paths_agree_under_a_schedule():
    dense = _loss_and_grad("elastic_arc", 0.6, "dense", seed=3)
    chunked = _loss_and_grad("elastic_arc", 0.6, "chunked", seed=3)
    for a, b in zip(dense[:3], chunked[:3]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)  # float32 inside, as at λ = 1
    assert not torch.allclose(dense[0], _loss_and_grad("elastic_arc", 1.0, "dense", seed=3)[0])


@pytest.mark.parametrize("head", ["arcface", "softmax"])
def test_a_run_logs_where_a_margin_head_stands_each_logging_step(tiny_cfg, tmp_path, head):
    """The diagnosis the issue asks for, per logging step: loss, θ_y mean and spread, the share past π, the target
    logit, the gradient norms reaching the backbone and the centres, the lr, and λ rising to 1; plain softmax
    logs its angle to its class's weight row beside them (it has no margin, so no share past π)."""
    run(tiny_cfg(f"head={head}", "margin_schedule=warmup", "trainer.log_every_n_steps=1"))
    rows = list(csv.DictReader((tmp_path / "csv" / "version_0" / "metrics.csv").open()))
    step_rows = [r for r in rows if r.get("train/loss")]
    for key in ("train/theta_y_mean_deg", "train/theta_y_std_deg", "train/share_theta_plus_m_over_pi",
                "train/target_logit_mean", "train/grad_norm_backbone", "train/grad_norm_centers",
                "train/margin_weight"):
        if head == "softmax" and key == "train/share_theta_plus_m_over_pi":
            assert not any(r.get(key) for r in rows)
            continue
        assert all(r.get(key) not in (None, "") and math.isfinite(float(r[key])) for r in step_rows), key
    assert any(r.get("lr-SGD") for r in rows)
    weights = [float(r["train/margin_weight"]) for r in step_rows]
    total = len(step_rows)
    assert weights == pytest.approx([min(1.0, k / round(0.5 * total)) for k in range(total)], abs=1e-7)
    assert all(0.0 <= float(r["train/theta_y_mean_deg"]) <= 180.0 for r in step_rows)


@pytest.mark.slow  # the command as typed; the in-process test above holds the rule
def test_bad_schedule_stops_the_command_before_the_first_step(tmp_path):
    cmd = [sys.executable, str(ROOT / "train.py"), *TINY, "margin_schedule=warmup", "margin_schedule.steps=1000"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "margin_schedule.steps=1000: longer than the run (6 optimizer steps)" in out.stderr
    assert "step 1/" not in out.stdout + out.stderr
