import pytest
import torch

from elasticface.schedulers import cosine, multistep, polynomial


def lrs(factory, steps, **kwargs):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = factory(opt, total_steps=steps, **kwargs)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_multistep_paper_milestones_in_steps():
    values = lrs(multistep, 20, milestones=[5, 10], gamma=0.1)
    assert values[4] == pytest.approx(0.1) and values[5] == pytest.approx(0.01) and values[10] == pytest.approx(0.001)


def test_multistep_fractions_and_warmup():
    values = lrs(multistep, 100, milestone_fractions=[0.5], warmup_steps=10)
    assert values[0] == pytest.approx(0.01) and values[9] == pytest.approx(0.1)
    assert values[49] == pytest.approx(0.1) and values[50] == pytest.approx(0.01)


def test_cosine_and_poly_decay_to_the_floor():
    c = lrs(cosine, 50, min_lr_ratio=0.1)
    assert c[0] == pytest.approx(0.1) and c[-1] == pytest.approx(0.01, rel=0.05)
    p = lrs(polynomial, 50, power=2.0)
    assert p[0] == pytest.approx(0.1) and p[-1] < 1e-3 and all(a >= b for a, b in zip(p, p[1:]))


@pytest.mark.parametrize("factory", [multistep, cosine, polynomial])
def test_warmup_as_a_share_of_the_run(factory):
    """warmup_fraction=0.2 of 1,256 steps is warmup_steps=251 (the LFW fold-10 run): lr = base x (step + 1) / 251."""
    by_fraction = lrs(factory, 1256, warmup_fraction=0.2)
    assert by_fraction == lrs(factory, 1256, warmup_steps=251)
    assert by_fraction[0] == pytest.approx(0.1 / 251) and by_fraction[250] == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs,message", [
        (dict(milestone_fractions=[1.5]), "milestone_fractions"),
        (dict(warmup_steps=100), r"scheduler.warmup_steps=100: must be in \[0, total steps = 50\)"),
        (dict(warmup_fraction=1.0), r"scheduler.warmup_fraction=1.0: expected a share of the run in \[0, 1\)"),
        (dict(warmup_fraction=-0.1), r"scheduler.warmup_fraction=-0.1: expected"),
        (dict(warmup_steps=5, warmup_fraction=0.2), "scheduler.warmup_steps=5 and scheduler.warmup_fraction=0.2: "
                                                    "expected one of the two"),
    ]
)
def test_bad_schedule_names_the_key(kwargs, message):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match=message):
        multistep(opt, total_steps=50, **kwargs)
