"""The config tree behaves as DESIGN.md says: head defaults, plain overrides, every option composes."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf

from conftest import CONFIG_DIR, ROOT, compose_train

from elasticface.heads.registry import head_names

HEADS = head_names()  # the head group's options: one per registry entry
EXPERIMENTS = sorted(p.stem for p in Path(CONFIG_DIR, "experiment").glob("*.yaml"))
PAPER = {
    "elastic_arc": (0.5, 64.0, 0.05),
    "elastic_arc_plus": (0.5, 64.0, 0.0175),
    "elastic_cos": (0.35, 64.0, 0.05),
    "elastic_cos_plus": (0.35, 64.0, 0.025),
}


@pytest.mark.parametrize("head,expected", sorted(PAPER.items()))
def test_head_group_sets_paper_defaults(head, expected):
    cfg = compose_train([f"head={head}", "scale=head"])
    assert (cfg.m, cfg.s, cfg.sigma) == expected
    assert (cfg.model.head.m, cfg.model.head.s, cfg.model.head.sigma) == expected


def test_plain_sigma_override_beats_the_head_default():
    cfg = compose_train(["head=elastic_arc_plus", "sigma=0.02"])
    assert cfg.sigma == 0.02 and cfg.model.head.sigma == 0.02 and cfg.m == 0.5


def test_top_level_keys_are_declared():
    cfg = compose_train([])
    for key in ("m", "s", "sigma", "seed"):
        assert key in cfg


@pytest.mark.parametrize("head", HEADS)
def test_every_head_config_builds_its_head(head):
    cfg = compose_train([f"head={head}", "scale=head"])  # the head's own s; scale=class_count: test_scale.py
    from elasticface.heads.base import MarginHead

    node = OmegaConf.to_container(cfg.model.head, resolve=True)
    module = instantiate(node)
    assert isinstance(module, MarginHead) and node["name"] == head
    k = module.centers_per_class
    cos = torch.empty(4, 5 * k).uniform_(-0.9, 0.9)
    labels = torch.tensor([0, 1, 4, 2])
    norms = torch.full((4,), 20.0) if module.needs_norms else None
    logits = module.train()(cos, labels, norms)
    assert logits.shape == (4, 5) and torch.isfinite(logits).all()
    assert module.eval()(cos).shape == (4, 5)


def test_a_head_yaml_of_the_users_own_is_an_option_beside_the_registrys(tmp_path):
    """The preset of docs/heads.md, as written there, in configs/head/: it starts from a registry option and changes
    what it likes; the registry's options stay there beside it."""
    from hydra import compose, initialize_config_dir

    section = (ROOT / "docs" / "heads.md").read_text().split("## Presets of your own")[1]
    preset_yaml = section.split("```yaml\n")[1].split("```")[0]
    assert "# configs/head/arcface_s32.yaml" in preset_yaml
    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs, ignore=shutil.ignore_patterns("local"))
    (configs / "head").mkdir(exist_ok=True)
    (configs / "head" / "arcface_s32.yaml").write_text(preset_yaml)
    compose_train([])  # registers the resolvers and the head group, as the commands do
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(configs)):
        preset = compose(config_name="train", overrides=["head=arcface_s32", "m=0.45"])
        registry = compose(config_name="train", overrides=["head=cosface"])
    GlobalHydra.instance().clear()
    assert (preset.m, preset.s, preset.sigma, preset.model.head.name) == (0.45, 32.0, None, "arcface")
    head = instantiate(preset.model.head)
    assert type(head).__name__ == "ArcFace" and (head.m, head.s) == (0.45, 32.0)
    assert (registry.m, registry.s, registry.model.head.name) == (0.35, "class_count", "cosface")  # scale's rule


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(experiment):
    # ++: sweep_demo and toy_2d train on synthetic faces (no root); the others on a data root
    cfg = compose_train([f"experiment={experiment}", "++data.root=/data/faces"])
    assert cfg.task_name != "train"
    OmegaConf.to_container(cfg.model, resolve=True)
    if experiment.startswith("ms1mv2_r100_"):  # the run's name is the experiment's, with its head
        head = experiment[len("ms1mv2_r100_"):]
        assert cfg.task_name == experiment and head in cfg.tags
        assert cfg.model.head.name == head
        assert instantiate(cfg.model.head).plus == head.endswith("_plus")


@pytest.mark.parametrize("override,message", [
    ("optimizer.lr=abc", r"optimizer.lr='abc': expected a number"),
    ("optimizer.momentum=fast", r"optimizer.momentum='fast': expected a number"),
    ("optimizer.lr=0", r"optimizer.lr=0.0: must be > 0"),
    ("scheduler.gamma=x", r"scheduler.gamma='x': expected a number"),
    ("sigma=abc", r"sigma='abc': expected a number"),
    ("seed=1.5", r"seed=1.5: must be an integer"),
])
def test_bad_numbers_fail_before_any_data_is_read_naming_the_key(override, message, tiny_cfg, monkeypatch):
    from elasticface.data import datamodule
    from elasticface.training import run

    monkeypatch.setattr(datamodule.FaceDataModule, "setup", lambda *a, **k: pytest.fail("data was read"))
    with pytest.raises(ValueError, match=message):
        run(tiny_cfg(override))


@pytest.mark.slow  # a debug=default run as typed
def test_callbacks_none_with_debug_default_trains(tmp_path):
    """`debug=default callbacks=none` crashed on a half-built progress-bar node (`on_exception`)."""
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=default", "callbacks=none",
                          "data.train_dataset.num_identities=8", "data.val_sets.num_pairs=40",
                          "data.val_sets.num_identities=10"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert list(tmp_path.glob("logs/debug/runs/*/summary.json"))


def test_a_callback_node_without_target_is_named(tiny_cfg):
    from elasticface.training import run

    with pytest.raises(ValueError, match=r"callbacks.oops=.*_target_"):
        run(tiny_cfg("+callbacks.oops.refresh_rate=1"))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_cfg_job_prints_the_composed_config_verbatim_command():
    out = run_cli("--cfg", "job", "head=elastic_arc_plus", "sigma=0.0175")
    assert out.returncode == 0, out.stderr
    cfg = OmegaConf.create(out.stdout)
    assert cfg.sigma == 0.0175 and cfg.m == 0.5 and cfg.s == "class_count"
    assert cfg.model.head.name == "elastic_arc_plus" and cfg.model.head.sigma == 0.0175


def test_unknown_head_lists_the_valid_choices():
    out = run_cli("head=no_such_head")
    assert out.returncode != 0
    assert "no_such_head" in out.stderr and "elastic_arc_plus" in out.stderr


@pytest.mark.parametrize("override,key", [("sigma=-0.1", "sigma"), ("s=0", "s"), ("m=5.0", "m")])
def test_bad_margin_values_fail_at_startup_naming_the_key(override, key, tiny_cfg):
    from elasticface.training import run

    with pytest.raises(Exception, match=rf"\b{key}\b"):
        run(tiny_cfg("head=elastic_arc", override))


def test_unknown_backbone_group_option_lists_the_valid_choices():
    out = run_cli("backbone=no_such_net")
    assert out.returncode != 0 and "iresnet50" in out.stderr and "mobilefacenet" in out.stderr


BACKBONES = sorted(p.stem for p in Path(CONFIG_DIR, "backbone").glob("*.yaml"))


@pytest.mark.parametrize("backbone", BACKBONES)
def test_every_backbone_is_built_for_the_data_image_size(backbone):
    """`data.image_size=56` (documented for quick CPU runs) reaches every backbone option (left null: 112, as
    test_default_backbone_embeds_faces_resized_to_56 and every tiny training run show)."""
    assert compose_train([f"backbone={backbone}", "data.image_size=56"]).model.backbone.img_size == 56


def test_default_backbone_embeds_faces_resized_to_56():
    """The default model takes 56x56 faces when data.image_size=56 (its FC once expected 112's 7x7 maps)."""
    assert compose_train([]).model.backbone.img_size is None
    backbone = instantiate(compose_train(["data.image_size=56"]).model.backbone).eval()
    assert backbone(torch.zeros(2, 3, 56, 56)).shape == (2, 512)


def test_unknown_timm_model_name_suggests_close_matches(tiny_cfg):
    from elasticface.training import run

    with pytest.raises(Exception, match="iresnet50"):
        run(tiny_cfg("model.backbone.name=iresnet5O"))



def test_a_value_left_mandatory_is_named_at_start_up():
    """`???` (a data root) stops the run before anything is read, naming the key (cfg.get() reads it as None);
    a fine-tune config without the file it starts from likewise."""
    from elasticface.finetune.config import resolve
    from elasticface.utils.config import validate_top_level

    with pytest.raises(ValueError, match=r"^data\.root: this config needs a value; .* e\.g\. data\.root=\.\.\."):
        validate_top_level(compose_train(["data=folder"]))
    with pytest.raises(ValueError, match=r"^finetune\.freeze_backbone_bn=true keeps .* no weights= names the file"):
        resolve(compose_train(["experiment=lfw_y1_finetune", "data.root=lfw_split"]))
    y1 = Path(__file__).parent / "data" / "mxnet" / "y1" / "model-0000.params"
    assert resolve(compose_train(["experiment=lfw_y1_finetune", "data.root=lfw_split", f"weights={y1}"])) is not None
