"""The paper's runs two ways (docs/paper_runs.md): experiment=released/... is the released train.py
(fdbtrs/ElasticFace 5496ec0), experiment=ms1mv2_r100_* the paper's text at its global batch of 512, and both
follow the global batch as the released code does. The expected values are the released code's numbers, written
here with their file:line, not read from this project's configs."""

import math
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DistributedSampler

from conftest import ROOT, compose_train

from elasticface import batch_scaling
from elasticface.utils.config import flatten

RELEASED = ["released/ms1mv2_r100_elastic_arc", "released/ms1mv2_r100_elastic_arc_plus",
            "released/ms1mv2_r100_elastic_cos", "released/ms1mv2_r100_elastic_cos_plus"]
MS1MV2_IMAGES = 5_822_653      # config/config.py:45 (config.num_image)
# train.py:110: lr = cfg.lr / 512 * cfg.batch_size * world_size, cfg.lr 0.1 (config/config.py:9)
RELEASED_LR = {(1, 128): 0.025, (4, 128): 0.1, (8, 128): 0.2, (8, 64): 0.1}
# config/config.py:50-52 (x 0.1 when m - 1 <= epoch, m in [8, 14, 20, 25]) with the LambdaLR stepped once per epoch
# (train.py:177-178) and ceil(images / world) // batch steps per epoch (DistributedSampler, drop_last, train.py:42-47)
RELEASED_DECAY_STEPS = {(1, 128): [318_423, 591_357, 864_291, 1_091_736],
                        (4, 128): [79_604, 147_836, 216_068, 272_928],
                        (8, 64): [79_604, 147_836, 216_068, 272_928]}
# the paper's text (arXiv 2109.09416, Sec. IV): 80k, 140k, 210k, 280k of 295,672 iterations at batch 512
PAPER_DECAY_STEPS = {(1, 128): [320_000, 560_000, 840_000, 1_120_000],
                     (4, 128): [80_000, 140_000, 210_000, 280_000],
                     (8, 64): [80_000, 140_000, 210_000, 280_000]}
PAPER_MAX_STEPS = {(1, 128): 1_182_688, (4, 128): 295_672, (8, 64): 295_672}


def composed(experiment: str, devices: int, batch: int, *more: str):
    cfg = compose_train([f"experiment={experiment}", "data.root=/data", f"trainer.devices={devices}",
                         f"data.batch_size={batch}", *more])
    batch_scaling.apply(cfg)
    return cfg


def lr_by_epoch(cfg, epochs: int) -> list[float]:
    """The lr of each epoch of the composed epoch schedule, stepped once per epoch as Lightning's `interval: epoch`."""
    from hydra.utils import instantiate

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.optimizer.lr)
    factory = OmegaConf.to_container(cfg.scheduler, resolve=True)
    assert factory.pop("interval") == "epoch"
    scheduler = instantiate(factory)(optimizer=optimizer, total_steps=0)
    lrs = []
    for _ in range(epochs):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("experiment", RELEASED)
@pytest.mark.parametrize("world, batch", sorted(RELEASED_DECAY_STEPS))
def test_released_decays_fall_where_the_released_code_puts_them(experiment, world, batch):
    cfg = composed(experiment, world, batch)
    assert cfg.trainer.max_epochs == 26 and cfg.trainer.max_steps == -1  # config/config.py:46 (num_epoch 26)
    steps_per_epoch = len(DistributedSampler(range(MS1MV2_IMAGES), num_replicas=world, rank=0)) // batch
    lrs = lr_by_epoch(cfg, 26)
    decays = [epoch * steps_per_epoch for epoch in range(1, 26) if lrs[epoch] < lrs[epoch - 1]]
    assert decays == RELEASED_DECAY_STEPS[(world, batch)]
    assert lrs[0] == pytest.approx(RELEASED_LR[(world, batch)]) and lrs[-1] == pytest.approx(lrs[0] * 1e-4)


@pytest.mark.parametrize("experiment", RELEASED)
@pytest.mark.parametrize("world, batch", sorted(RELEASED_LR))
def test_released_lr_is_linear_in_the_global_batch(experiment, world, batch):
    assert composed(experiment, world, batch).optimizer.lr == pytest.approx(RELEASED_LR[(world, batch)])


@pytest.mark.parametrize("world, batch", sorted(PAPER_DECAY_STEPS))
def test_the_papers_text_follows_the_global_batch(world, batch):
    cfg = composed("ms1mv2_r100_elastic_arc", world, batch)
    assert list(cfg.scheduler.milestones) == PAPER_DECAY_STEPS[(world, batch)]
    assert cfg.trainer.max_steps == PAPER_MAX_STEPS[(world, batch)]
    assert cfg.optimizer.lr == pytest.approx(0.1 * world * batch / 512)


def test_the_papers_text_as_written_with_scaling_off():
    cfg = composed("ms1mv2_r100_elastic_arc", 1, 128, "batch_scaling.reference_batch=null")
    assert (cfg.optimizer.lr, list(cfg.scheduler.milestones), cfg.trainer.max_steps) == (
        0.1, [80_000, 140_000, 210_000, 280_000], 295_672)


def test_the_scaling_says_what_it_did_in_one_line(caplog):
    with caplog.at_level("INFO", logger="elasticface.batch_scaling"):
        composed("ms1mv2_r100_elastic_arc", 8, 128)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "global batch 1024, batch_scaling.reference_batch 512: optimizer.lr 0.1 -> 0.2" in lines[0]
    assert "scheduler.milestones [80000, 140000, 210000, 280000] -> [40000, 70000, 105000, 140000]" in lines[0]


@pytest.mark.parametrize("devices", ["auto", -1])
def test_a_global_batch_that_cannot_be_computed_names_the_key(devices):
    cfg = compose_train(["experiment=ms1mv2_r100_elastic_arc", "data.root=/data", f"trainer.devices={devices}"])
    with pytest.raises(ValueError, match=r"trainer.devices=.*set trainer.devices=<N>, or "
                                         r"batch_scaling.reference_batch=null"):
        batch_scaling.apply(cfg)


# the head arguments of each released run (config/config.py:19-34): s 64, m 0.5 / 0.35, sigma 0.05, Arc+ 0.0175,
# Cos+ 0.02 (:30); no guard (utils/losses.py:52-54); the "+" indexes the sorted margins with the sort permutation
# (utils/losses.py:44-49, 78-83: plus_assignment=official)
RELEASED_HEADS = {
    "released/ms1mv2_r100_elastic_arc": dict(name="elastic_arc", m=0.5, s=64.0, sigma=0.05, guard="none"),
    "released/ms1mv2_r100_elastic_arc_plus": dict(name="elastic_arc_plus", m=0.5, s=64.0, guard="none",
                                                  plus_assignment="official"),
    "released/ms1mv2_r100_elastic_cos": dict(name="elastic_cos", m=0.35, s=64.0, sigma=0.05, guard="none"),
    "released/ms1mv2_r100_elastic_cos_plus": dict(name="elastic_cos_plus", m=0.35, s=64.0, sigma=0.02, guard="none",
                                                  plus_assignment="official"),
}


@pytest.mark.parametrize("experiment", sorted(RELEASED_HEADS))
def test_released_head_arguments(experiment):
    head = OmegaConf.to_container(composed(experiment, 4, 128).model.head, resolve=True)
    assert {k: head[k] for k in RELEASED_HEADS[experiment]} == RELEASED_HEADS[experiment]
    assert (head["rank_scope"], head["truncate"], head["gradient"]) == ("local", None, "exact")


@pytest.mark.parametrize("row, expected", [
    ("arcface_m0.5", {"guard": "none"}),
    ("elastic_arc_plus_sigma0.0175", {"guard": "none", "plus_assignment": "official"}),
    ("elastic_cos_plus_sigma0.025", {"guard": "none", "plus_assignment": "official", "sigma": 0.025}),
])
def test_the_released_casia_grid(row, expected):
    """train.py:53 dropout 0.4; config/config.py:59 40 epochs, :63-65 x 0.1 for m in [22, 30, 40] with m - 1 <=
    epoch, :62 eval_step 958; each row of the sweep keeps the released head arguments."""
    cfg = composed("released/casia_r50_sigma_grid", 4, 128, f"paper_row={row}")
    assert cfg.model.backbone.dropout == 0.4 and cfg.trainer.max_epochs == 40
    assert (cfg.trainer.val_check_interval, cfg.trainer.check_val_every_n_epoch) == (958, None)
    lrs = lr_by_epoch(cfg, 40)
    assert [e for e in range(1, 40) if lrs[e] < lrs[e - 1]] == [21, 29, 39]
    head = OmegaConf.to_container(cfg.model.head, resolve=True)
    assert {k: head[k] for k in expected} == expected


def test_the_casia_experiment_takes_the_released_recipe_with_the_registrys_heads():
    cfg = composed("casia_r50_sigma_grid", 4, 128, "paper_row=elastic_arc_plus_sigma0.0175")
    assert cfg.model.backbone.dropout == 0.4 and cfg.trainer.max_epochs == 40 and cfg.optimizer.lr == 0.1
    assert [e for e in range(1, 40) if (lrs := lr_by_epoch(cfg, 40))[e] < lrs[e - 1]] == [21, 29, 39]
    assert (cfg.model.head.guard, cfg.model.head.plus_assignment) == ("thmm", "paper")


#: what a released run may change of today's experiment, and nothing else
CHANGED = {"task_name", "tags", "logger/wandb/tags", "logger/wandb/name", "logger/tensorboard/name",
           "logger/mlflow/tags", "logger/mlflow/run_name", "logger/mlflow/experiment_name", "scheduler",
           "trainer/max_steps", "trainer/max_epochs", "model/scheduler", "model/head/guard",
           "model/head/plus_assignment", "sigma", "model/head/sigma", "trainer/val_check_interval",
           "trainer/check_val_every_n_epoch"}


@pytest.mark.parametrize("experiment", [*RELEASED, "released/casia_r50_sigma_grid"])
def test_everything_else_composes_as_todays_experiment(experiment, tmp_path):
    def flat(name: str) -> dict:
        cfg = compose_train([f"experiment={name}", "data.root=/data"], tmp_path)
        return flatten(OmegaConf.to_container(cfg, resolve=True))

    ours, theirs = flat(experiment), flat(experiment.removeprefix("released/"))
    differ = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k) and not k.startswith("hydra/")}
    assert {k for k in differ if not any(k == c or k.startswith(c + "/") for c in CHANGED)} == set()


def test_every_head_argument_is_in_the_printed_config():
    """`--cfg job` shows each argument of the chosen head; one sets it without `+`."""
    out = subprocess.run([sys.executable, "train.py", "--cfg", "job", "head=elastic_arc_plus",
                          "model.head.plus_assignment=official"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    head = OmegaConf.create(out.stdout).model.head
    assert (head.plus_assignment, head.guard, head.gradient, head.rank_scope) == ("official", "thmm", "exact", "local")
    assert "truncate" in head and "seed" in head


def test_the_logged_hyperparameters_carry_the_head_arguments(tmp_path):
    """W&B and TensorBoard's HPARAMS get these (training.run logs them to every logger)."""
    from elasticface.training import hyperparameters

    params = hyperparameters(compose_train(["head=elastic_arc_plus"], tmp_path), 64.0)
    assert (params["model/head/plus_assignment"], params["model/head/guard"]) == ("paper", "thmm")


def test_a_checkpoint_written_before_the_head_arguments_were_in_the_config_loads(tiny_cfg, tmp_path):
    """Its model.head names only m, s, sigma: the registry supplies the rest, and the allowlist accepts it."""
    from elasticface.module import FaceRecognitionModule
    from elasticface.training import build_module

    cfg = tiny_cfg("head=elastic_arc_plus")
    module = build_module(cfg, 8)
    hparams = dict(module.hparams)
    hparams["head"] = {k: v for k, v in hparams["head"].items() if k in ("_target_", "name", "m", "s", "sigma")}
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": hparams}, tmp_path / "old.ckpt")
    loaded = FaceRecognitionModule.load_from_checkpoint(tmp_path / "old.ckpt")
    assert (loaded.head.plus_assignment, loaded.head.guard, loaded.head.sigma) == ("paper", "thmm", 0.0175)


def test_milestone_epochs_follow_the_released_rule():
    """config/config.py:63-65 (m in [22, 30, 40]): epochs 0-20 at 1, 21-28 at 0.1, 29-38 at 0.01, 39 at 0.001."""
    from elasticface.schedulers import epoch_multistep

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = epoch_multistep(optimizer, 0, milestones=[22, 30, 40])
    factors = [scheduler.lr_lambdas[0](epoch) for epoch in range(40)]
    assert factors == pytest.approx([1.0] * 21 + [0.1] * 8 + [0.01] * 10 + [0.001])
    with pytest.raises(ValueError, match=r"scheduler.milestones=\[0\]: epochs"):
        epoch_multistep(optimizer, 0, milestones=[0])
    assert math.isclose(factors[-1], 0.1 ** 3)


def test_a_device_list_counts_its_devices_and_a_bad_reference_is_named():
    cfg = compose_train(["experiment=ms1mv2_r100_elastic_arc", "data.root=/data", "trainer.devices=[0,1]"])
    assert batch_scaling.global_batch(cfg) == 256
    cfg = compose_train(["experiment=ms1mv2_r100_elastic_arc", "data.root=/data", "batch_scaling.reference_batch=0"])
    with pytest.raises(ValueError, match=r"batch_scaling.reference_batch=0: expected the global batch"):
        batch_scaling.apply(cfg)


def test_a_bad_schedule_interval_is_named_at_start_up():
    from elasticface.utils.config import validate_top_level

    cfg = compose_train(["experiment=released/ms1mv2_r100_elastic_arc", "data.root=/data", "scheduler.interval=batch"])
    with pytest.raises(ValueError, match=r"scheduler.interval='batch': expected one of \['step', 'epoch'\]"):
        validate_top_level(cfg)
