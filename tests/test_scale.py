"""scale: class_count (the default): AdaCos's fixed scale for the training classes; scale: head and the paper's
and released recipes keep the head's own s."""

import logging

import pytest
from omegaconf import OmegaConf

from conftest import compose_train

from elasticface.heads.registry import HEADS
from elasticface.training import build_module, run

# AdaCos (Zhang et al. 2019): s = sqrt(2)·ln(C - 1), worked out apart from the code (bc -l: sqrt(2)*l(C-1))
ADACOS = {3830: 11.667769523625457, 85742: 16.064174047646333, 10572: 13.10391857113892}

KEEP_THE_HEADS_SCALE = [
    ["experiment=ms1mv2_r100", "data.root=/data"],
    ["experiment=ms1mv2_r100_elastic_cos_plus", "data.root=/data"],
    ["experiment=released/ms1mv2_r100_elastic_arc", "data.root=/data"],
    ["experiment=casia_r50_sigma_grid", "data.root=/data"],
    ["experiment=released/casia_r50_sigma_grid", "data.root=/data"],
    ["experiment=toy_2d"],
    ["experiment=sweep_demo"],
    ["experiment=lfw_y1_finetune", "data.root=/data"],
    ["scale=head"],
    ["experiment=lfw_fold10", "data.root=/data", "lfw_remedy=none"],
]


def test_the_default_is_the_class_count_rule():
    cfg = compose_train([])
    assert cfg.scale == cfg.s == cfg.model.head.s == "class_count"


@pytest.mark.parametrize("overrides", KEEP_THE_HEADS_SCALE, ids=lambda o: o[-1])
def test_the_papers_and_released_recipes_keep_the_heads_own_scale(overrides):
    cfg = compose_train(overrides)
    head = OmegaConf.select(cfg, "hydra.runtime.choices.head")
    assert cfg.scale == "head" and cfg.s == cfg.model.head.s == HEADS[head].s == 64.0


@pytest.mark.parametrize("classes", sorted(ADACOS))
def test_build_module_sets_the_scale_for_the_classes(classes, caplog):
    cfg = compose_train(["head=cosface", "model.embedding_size=8"])
    with caplog.at_level(logging.INFO, logger="elasticface.scale"):
        module = build_module(cfg, classes)
    assert module.head.s == pytest.approx(ADACOS[classes], rel=1e-12)
    assert module.hparams.head["s"] == pytest.approx(ADACOS[classes], rel=1e-12)  # the checkpoint's
    assert f"= {ADACOS[classes]:.4f} for C = {classes} classes" in caplog.text


@pytest.mark.parametrize("overrides,s", [(["s=32"], 32.0), (["scale=head", "s=16"], 16.0), (["head=softmax"], None)])
def test_a_typed_scale_wins_and_a_head_without_one_has_none(overrides, s):
    assert build_module(compose_train([*overrides, "model.embedding_size=8"]), 3830).head.s == s


def test_the_rule_needs_three_classes():
    with pytest.raises(ValueError, match=r"^s=class_count: sqrt\(2\)·ln\(C - 1\) needs at least 3 classes, the "
                                         r"data has 2; give s=<number> or scale=head$"):
        build_module(compose_train(["model.embedding_size=8"]), 2)


@pytest.mark.parametrize("override,message", [
    ("s=0", r"^s=0: the scale must be > 0, or class_count"),
    ("s=-1", r"^s=-1: the scale must be > 0, or class_count"),
    ("s=classcount", r"^s='classcount': expected a number > 0 or class_count"),
    ("scale=adacos", r"^scale='adacos': expected one of \['class_count', 'head'\]"),
])
def test_a_bad_scale_is_a_one_line_error_before_the_first_step(override, message, tmp_path):
    with pytest.raises(Exception, match=message):
        run(compose_train(["debug=tiny", override], tmp_path))
    assert not any(tmp_path.rglob("*.ckpt"))

