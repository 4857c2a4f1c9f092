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


@pytest.mark.parametrize(
    "kwargs,key", [(dict(milestone_fractions=[1.5]), "milestone_fractions"), (dict(warmup_steps=100), "warmup_steps")]
)
def test_bad_schedule_names_the_key(kwargs, key):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match=key):
        multistep(opt, total_steps=50, **kwargs)
