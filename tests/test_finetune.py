"""What weights= does to a training run: the file's architecture, imprinted centres, the head-only phase, L2-SP,
the recipe's defaults and the summary's per-set change, and each bad input's one-line error.

Weights files are written in the released layouts (tests/helpers/insightface_layout.py; MXNet's own y1 files in
tests/data/mxnet), never by saving this project's models; oracles are computed here without the code under test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from elasticface.backbones.weights import WeightsError
from elasticface.cli.compose import compose_train

sys.path.insert(0, str(Path(__file__).parent))
from helpers.images import smooth_jpeg  # noqa: E402
from helpers.insightface_layout import TINY, iresnet_layout, released_state_dict  # noqa: E402

Y1_PARAMS = Path(__file__).parent / "data" / "mxnet" / "y1" / "model-0000.params"
QUICK = ["trainer.max_epochs=1", "trainer.limit_train_batches=1", "logger=[]", "pixel_baseline=false",
         "data.val_sets.num_pairs=10", "data.batch_size=4"]


def _tiny_file(tmp_path: Path, seed: int = 5) -> str:
    path = tmp_path / "tiny32.pth"
    torch.save(released_state_dict(iresnet_layout(embedding_size=32, **TINY), seed), path)
    return str(path)


# -- item 0: the file says its architecture ----------------------------------------------------------------------


def test_weights_alone_builds_the_backbone_and_embedding_the_file_holds(tiny_cfg, caplog):
    """y1's MXNet files (128-d MobileFaceNet) into a run whose config says iresnet_tiny and 32-d: the file wins."""
    from elasticface.training import run

    cfg = tiny_cfg(f"weights={Y1_PARAMS}", *QUICK)
    assert cfg.model.backbone.name == "iresnet_tiny" and cfg.model.embedding_size == 32
    with caplog.at_level("INFO"):
        summary = run(cfg)
    assert summary["weights"]["backbone"] == "mobilefacenet_y1" and summary["weights"]["embedding_size"] == 128
    assert summary["weights"]["read_off_the_file"] == ["backbone", "embedding_size"]
    assert summary["backbone"] == "mobilefacenet_y1", "the summary names the backbone that trained"
    lines = [r.getMessage() for r in caplog.records if "read off its tensors" in r.getMessage()]
    assert len(lines) == 1 and "mobilefacenet_y1 with a 128-d embedding" in lines[0]
    saved = json.loads((Path(cfg.paths.output_dir) / "summary.json").read_text())
    assert saved["weights"]["backbone"] == "mobilefacenet_y1"
    ckpt = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["backbone"]["name"] == "mobilefacenet_y1"
    assert ckpt["hyper_parameters"]["embedding_size"] == 128


def test_a_fine_tune_says_what_it_runs_before_its_passes_and_each_pass_how_long_it_took(tiny_cfg, caplog):
    """The overview first, naming the backbone read off the file and the recipe; then the loaded weights' baseline and
    imprinting, each saying what it does and how long it took; no silent pass (utils/progress.py)."""
    from elasticface.training import run

    cfg = tiny_cfg(f"weights={Y1_PARAMS}", *QUICK, "extras.print_config=short")
    with caplog.at_level("INFO"):
        run(cfg)
    lines = [r.getMessage() for r in caplog.records]
    overview = next(i for i, line in enumerate(lines) if line.startswith("this run:"))
    assert "backbone  mobilefacenet_y1 (" in lines[overview] and "finetune=recipe" in lines[overview]
    baseline = [i for i, line in enumerate(lines) if line.startswith("baseline start: the loaded weights")]
    imprint = [i for i, line in enumerate(lines) if line.startswith("imprinting the centres of 8 classes")]
    assert overview < baseline[0] <= baseline[-1] < imprint[0], lines
    assert "accuracy " in lines[baseline[-1]] and " images in " in lines[baseline[-1]], "the pass's last line"
    assert " images in " in lines[imprint[-1]]


def test_named_backbone_keeps_its_name_and_takes_the_files_embedding_size(tiny_cfg):
    from elasticface.finetune.architecture import fit_to_weights

    cfg = tiny_cfg(f"weights={Y1_PARAMS}", "backbone=mobilefacenet_y1")
    _, used = fit_to_weights(cfg, str(Y1_PARAMS))
    assert used == {"backbone": "mobilefacenet_y1", "embedding_size": 128, "read_off_the_file": ["embedding_size"]}


def test_named_backbone_that_disagrees_with_the_file_is_refused_before_data(tiny_cfg, tmp_path):
    from elasticface.training import run

    cfg = tiny_cfg("backbone=tiny", f"weights={Y1_PARAMS}", "data=folder", f"data.root={tmp_path / 'no_such'}")
    with pytest.raises(WeightsError, match=r"model-0000.params: does not fit iresnet_tiny .* looks like "
                                           r"mobilefacenet_y1") as err:
        run(cfg)
    assert "\n" not in str(err.value)


def test_embedding_size_on_the_command_line_that_differs_from_the_file_is_refused(tiny_cfg, tmp_path):
    from elasticface.training import run

    cfg = tiny_cfg(f"weights={Y1_PARAMS}", "model.embedding_size=512", "data=folder",
                   f"data.root={tmp_path / 'no_such'}")
    with pytest.raises(WeightsError, match=r"holds a 128-d embedding .* model.embedding_size=512"):
        run(cfg)


# -- the recipe's defaults ---------------------------------------------------------------------------------------


def test_recipe_applies_with_weights_only_and_each_part_switches_off(tiny_cfg, tmp_path):
    """weights= selects finetune=recipe: the settings docs/finetune.md measured, each one overridable, and
    finetune=none keeps the from-scratch ones."""
    keys = ("imprint_centers", "head_only_epochs", "l2sp_alpha", "backbone_lr_scale", "freeze_backbone_bn",
            "wise_alpha")
    scratch = tiny_cfg()
    assert [scratch.finetune[k] for k in keys] == [False, 0, 0.0, 1.0, False, 1.0]
    weights = f"weights={_tiny_file(tmp_path)}"
    recipe = tiny_cfg(weights)
    # the recipe chosen over three domains (docs/finetune.md): imprinted centres, s = 64, lr 0.01, batch 64, 8 epochs,
    # WiSE-FT 0.95
    assert [recipe.finetune[k] for k in keys] == [True, 0, 0.0, 1.0, False, 0.95]
    assert (recipe.scale, recipe.s, recipe.optimizer.lr) == ("head", 64.0, 0.01)
    assert (scratch.scale, scratch.optimizer.lr) == ("class_count", 0.1)
    typed_alone = compose_train([weights, "data=folder_bin", "data.root=faces"])  # no debug mode to shorten it
    assert (typed_alone.data.batch_size, typed_alone.trainer.max_epochs, typed_alone.model.compile,
            typed_alone.model.channels_last) == (64, 8, "auto", "auto")
    typed = tiny_cfg(weights, "optimizer.lr=0.05", "trainer.max_epochs=2", "finetune.imprint_centers=false")
    assert (typed.optimizer.lr, typed.trainer.max_epochs, typed.finetune.imprint_centers) == (0.05, 2, False)
    off = tiny_cfg(weights, "finetune=none")
    assert off.optimizer.lr == scratch.optimizer.lr and off.scale == "class_count" and not off.finetune.imprint_centers


def test_weights_select_the_recipe_on_the_command_line_as_typed():
    from elasticface.finetune.config import with_recipe

    assert with_recipe(["weights=a.pth", "seed=1"]) == ["weights=a.pth", "finetune=recipe", "seed=1"]
    assert with_recipe(["-m", "weights=a.pth,b.pth", "--cfg", "job"])[:3] == ["-m", "weights=a.pth,b.pth",
                                                                              "finetune=recipe"]
    for unchanged in (["seed=1"], ["weights=null"], ["weights="], ["weights=a.pth", "finetune=none"],
                      ["weights=a.pth", "~finetune"], ["weights=a.pth", "+finetune=recipe"]):
        assert with_recipe(unchanged) == unchanged


# -- imprinting ----------------------------------------------------------------------------------------------------


def test_imprinted_centres_are_the_class_means_of_the_loaded_backbone(tiny_cfg):
    """Oracle: each face embedded on its own, in float64, grouped by label with numpy."""
    from hydra.utils import instantiate

    from elasticface.finetune.imprint import imprint_centers
    from elasticface.training import build_module

    cfg = tiny_cfg()
    data = instantiate(cfg.data)
    data.setup("fit")
    model = build_module(cfg, data.num_classes)
    model.backbone.train()
    means = imprint_centers(model, data.train_set, batch_size=5)
    assert model.backbone.training, "the backbone's mode is restored"
    model.backbone.eval()
    rows, labels = [], []
    with torch.no_grad():
        for i in range(len(data.train_set)):
            image, label = data.train_set[i]
            x = (image[None].double() / 255 - 0.5) / 0.5
            rows.append(model.backbone.double()(x)[0].numpy())
            labels.append(label)
    rows = np.stack(rows)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    expected = np.stack([rows[np.asarray(labels) == c].mean(0) for c in range(data.num_classes)])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(model.centers.weight.detach().numpy(), expected, atol=2e-5)
    np.testing.assert_allclose(means.numpy(), expected, atol=2e-5)


def test_imprinting_a_class_without_a_training_image_is_refused(tmp_path):
    from elasticface.data.folder import ImageFolderFaces
    from elasticface.finetune.imprint import class_means

    for who, n in (("a", 2), ("b", 0), ("c", 1)):
        (tmp_path / who).mkdir()
        for k in range(n):
            (tmp_path / who / f"{k}.jpg").write_bytes(smooth_jpeg(10 * ord(who) + k))
    faces = ImageFolderFaces(str(tmp_path))
    with pytest.raises(ValueError, match=r"^finetune.imprint_centers=true: class 1 \(b\) has no training image") as err:
        class_means(torch.nn.Flatten(), faces, faces.num_classes)
    assert "\n" not in str(err.value)


# -- L2-SP -----------------------------------------------------------------------------------------------------------


def test_l2sp_adds_alpha_times_the_distance_to_the_start_to_the_backbones_gradient(tiny_cfg, tmp_path):
    from elasticface.finetune.phases import FineTuning
    from elasticface.training import build_module

    alpha = 0.3
    cfg = tiny_cfg(f"weights={_tiny_file(tmp_path)}", f"finetune.l2sp_alpha={alpha}")
    model = build_module(cfg, num_classes=8)
    tuning = FineTuning(**cfg.finetune)
    tuning.setup(None, model, "fit")  # the start: the backbone's weights as loaded
    start = {n: p.detach().clone() for n, p in model.backbone.named_parameters()}
    with torch.no_grad():
        for p in model.backbone.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    model.backbone.zero_grad()
    penalty = tuning.start_point.pull(model.backbone, alpha, penalty=True)
    trained = [(n, p) for n, p in model.backbone.named_parameters() if p.requires_grad]  # not the fixed BN scale
    for name, p in trained:
        torch.testing.assert_close(p.grad, alpha * (p.detach() - start[name]), rtol=1e-5, atol=1e-7)
    expected = 0.5 * alpha * sum(float(((p.detach().double() - start[n].double()) ** 2).sum()) for n, p in trained)
    assert float(penalty) == pytest.approx(expected, rel=1e-5)
    groups = model.param_groups()
    assert groups[0]["name"] == "backbone" and groups[0]["weight_decay"] == 0.0, "L2-SP replaces weight decay"
    assert "weight_decay" not in groups[1], "the centres keep the optimizer's"
    assert "w0" not in "".join(model.state_dict()), "the start weights are not saved in checkpoints"


def test_l2sp_without_weights_is_refused_before_data(tiny_cfg):
    from elasticface.finetune.config import resolve

    with pytest.raises(ValueError, match=r"^finetune.l2sp_alpha=0.01 pulls the backbone toward the weights .* no "
                                         r"weights= names the file"):
        resolve(tiny_cfg("finetune.l2sp_alpha=0.01"))


# -- WiSE-FT ---------------------------------------------------------------------------------------------------------


def _final_backbone(summary: dict) -> dict[str, torch.Tensor]:
    state = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)["state_dict"]
    return {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}


def test_wise_mixes_the_loaded_weights_back_after_the_last_step_before_the_final_verification(tmp_path, caplog):
    """The same seeded fine-tune with wise_alpha 1 (as trained: w) and 0.25: the second ends at 0.75 w0 + 0.25 w
    (the paper's rule, in float64 here), says so once, before the run's last validation, and a resume from its last
    checkpoint (no step left) does not mix again."""
    from elasticface.backbones.from_weights import backbone_from_weights
    from elasticface.training import run

    weights = _tiny_file(tmp_path)
    quick = ["debug=tiny", f"weights={weights}", *QUICK, "trainer.max_epochs=2", "trainer.limit_train_batches=2"]
    trained = _final_backbone(run(compose_train([*quick, "finetune.wise_alpha=1"], tmp_path / "as_trained")))
    with caplog.at_level("INFO"):
        mixed_run = run(compose_train([*quick, "finetune.wise_alpha=0.25"], tmp_path / "mixed"))
    mixed = _final_backbone(mixed_run)
    loaded = backbone_from_weights(weights, "iresnet_tiny", 32)[0].state_dict()
    floating = [k for k, v in loaded.items() if v.is_floating_point()]
    assert any("running_var" in k for k in floating), "BatchNorm's statistics are mixed too"
    for key in floating:
        expected = 0.75 * loaded[key].double() + 0.25 * trained[key].double()
        torch.testing.assert_close(mixed[key].double(), expected, rtol=1e-5, atol=1e-6, msg=key)
    for key in set(loaded) - set(floating):  # the step counters stay the fine-tune's
        assert torch.equal(mixed[key], trained[key]), key
    said = [r.getMessage() for r in caplog.records]
    wise = [i for i, line in enumerate(said) if line.startswith("finetune.wise_alpha=0.25: after step 4 ")]
    final_validation = [i for i, line in enumerate(said) if line.startswith("validation at step 4 ")]
    assert len(wise) == 1 and final_validation and wise[0] < final_validation[-1], said
    again = run(compose_train([*quick, "finetune.wise_alpha=0.25", f"ckpt_path={mixed_run['last_checkpoint']}"],
                              tmp_path / "resumed"))
    for key, value in _final_backbone(again).items():
        assert torch.equal(value, mixed[key]), f"{key}: mixed twice"


@pytest.mark.parametrize("alpha", ["1.5", "-0.1", "true"])
def test_wise_alpha_outside_0_1_is_refused_before_data(tiny_cfg, tmp_path, alpha):
    from elasticface.finetune.config import resolve

    with pytest.raises(ValueError, match=r"^finetune.wise_alpha=.*: expected a number in \[0, 1\]"):
        resolve(tiny_cfg(f"weights={_tiny_file(tmp_path)}", f"finetune.wise_alpha={alpha}"))


def test_wise_without_weights_is_refused_before_data(tiny_cfg):
    from elasticface.finetune.config import resolve

    with pytest.raises(ValueError, match=r"^finetune.wise_alpha=0.9 mixes the weights it was loaded from .* no "
                                         r"weights= names the file"):
        resolve(tiny_cfg("finetune.wise_alpha=0.9"))
    assert resolve(tiny_cfg("finetune.wise_alpha=1")) is None  # off: nothing to refuse


# -- the head-only phase ----------------------------------------------------------------------------------------


def test_head_only_phase_holds_the_backbone_as_loaded_then_trains_it(tiny_cfg, tmp_path):
    """8 x 6 faces in batches of 16: 3 steps an epoch; the first epoch trains the centres only (the step-2
    checkpoint's backbone, BatchNorm statistics included, is the file's), the second the backbone too."""
    from elasticface.training import run

    path = _tiny_file(tmp_path)
    cfg = tiny_cfg(f"weights={path}", "finetune.head_only_epochs=1", "finetune.freeze_backbone_bn=false",
                   "trainer.max_epochs=2", "logger=[]", "pixel_baseline=false", "checkpoint.every_n_steps=2",
                   "start_baseline=false")
    summary = run(cfg)
    assert summary["baseline/start_acc"] is None and summary["change_from_weights"] == {}, "start_baseline=false"
    released = torch.load(path, weights_only=True)
    checkpoints = Path(summary["last_checkpoint"]).parent
    during = torch.load(next(checkpoints.glob("*step*2.ckpt")), map_location="cpu", weights_only=False)
    after = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)
    assert during["global_step"] == 2 and after["global_step"] == 6
    for key, value in released.items():
        assert torch.equal(during["state_dict"]["backbone." + key], value), key
    assert not torch.equal(during["state_dict"]["classifier.centers.weight"],
                           after["state_dict"]["classifier.centers.weight"])
    moved = [k for k, v in released.items() if not torch.equal(after["state_dict"]["backbone." + k], v)]
    assert any(k.endswith("running_mean") for k in moved) and any(k.endswith("conv1.weight") for k in moved)


def test_head_only_step_leaves_the_backbone_without_gradients(tiny_cfg, tmp_path):
    from elasticface.finetune.phases import FineTuning
    from elasticface.training import build_module

    cfg = tiny_cfg(f"weights={_tiny_file(tmp_path)}", "finetune.head_only_epochs=1")
    model = build_module(cfg, num_classes=8)
    tuning = FineTuning(**cfg.finetune)
    tuning.head_only_steps = 1
    tuning.on_train_batch_start(SimpleNamespace(global_step=0), model, None, 0)
    images = torch.rand(4, 3, 112, 112) * 2 - 1
    model.training_step((images, torch.tensor([0, 1, 2, 3])), 0)["loss"].backward()
    assert not model.backbone.training
    assert all(p.grad is None for p in model.backbone.parameters())
    assert model.centers.weight.grad is not None and model.centers.weight.grad.abs().sum() > 0
    tuning.on_train_batch_start(SimpleNamespace(global_step=1), model, None, 1)
    assert model.backbone.training and all(p.requires_grad for p in model.backbone.parameters())


@pytest.mark.parametrize("bound, message", [
    ("trainer.max_epochs=2", r"finetune.head_only_epochs=2: the head-only phase \(2 epochs\) is not shorter than the "
                             r"run \(2 epochs\)"),
])
def test_head_only_phase_as_long_as_the_run_is_refused_before_data(tiny_cfg, tmp_path, bound, message):
    from elasticface.training import run

    cfg = tiny_cfg(f"weights={_tiny_file(tmp_path)}", "finetune.head_only_epochs=2", bound, "data=folder",
                   f"data.root={tmp_path / 'no_such'}")
    with pytest.raises(ValueError, match="^" + message):
        run(cfg)


def test_head_only_phase_longer_than_a_step_bounded_run_is_refused_before_the_first_step(tiny_cfg, tmp_path):
    from elasticface.training import run

    cfg = tiny_cfg(f"weights={_tiny_file(tmp_path)}", "finetune.head_only_epochs=1", "trainer.max_steps=2",
                   "logger=[]", "pixel_baseline=false")
    with pytest.raises(ValueError, match=r"^finetune.head_only_epochs=1: the head-only phase \(3 steps\) is not "
                                         r"shorter than the run \(2 steps\)"):
        run(cfg)


# -- the summary -------------------------------------------------------------------------------------------------


def test_summary_gives_start_end_and_change_per_set():
    from elasticface.run_summary import change_from_weights, format_summary

    changes = change_from_weights({"cfp_fp": 0.93, "lfw": 0.994, "new": 0.5}, {"cfp_fp": 0.89, "lfw": 0.995})
    assert changes["cfp_fp"] == {"start": 0.89, "end": 0.93, "change": pytest.approx(0.04)}
    assert changes["lfw"]["change"] == pytest.approx(-0.001) and "new" not in changes
    summary = {"val/acc_mean": {"best": 0.962, "final": 0.962}, "val/sets": {"cfp_fp": 0.93, "lfw": 0.994},
               "s": 64.0, "m": 0.5, "sigma": 0.05, "seed": 1, "head": "elastic_arc", "backbone": "tiny",
               "data": "folder_bin", "global_step": 10, "train_seconds": 1.0, "images_per_second": 1.0,
               "baseline/pixel_acc": None, "baseline/pixel_acc_per_set": {}, "baseline/start_acc": 0.9425,
               "baseline/start_acc_per_set": {"cfp_fp": 0.89, "lfw": 0.995}, "change_from_weights": changes,
               "output_dir": "out"}
    text = format_summary(summary)
    assert "loaded weights   89.00%   change +4.00" in text and "loaded weights   99.50%   change -0.10" in text


def test_no_head_only_phase_needs_no_epoch_length_and_a_phase_does():
    from elasticface.finetune.head_only import head_only_steps

    assert head_only_steps(0.0, float("inf"), 6) == 0  # a step-bounded run whose epochs Lightning cannot count
    with pytest.raises(ValueError, match=r"finetune.head_only_epochs=1: this run's epochs have no known length"):
        head_only_steps(1.0, float("inf"), 6)


def test_a_key_typed_over_the_recipe_wins_and_is_said_once(tiny_cfg, tmp_path, caplog):
    from elasticface.finetune.config import resolve, typed_over_recipe

    recipe = OmegaConf.create({"scale": "head", "optimizer": {"lr": 0.01}, "trainer": {"max_epochs": 4}})
    assert typed_over_recipe(["optimizer.lr=0.05", "seed=3", "+trainer.max_epochs=2"], recipe) == {
        "optimizer.lr": ("0.05", 0.01), "trainer.max_epochs": ("2", 4)}
    cfg = tiny_cfg(f"weights={_tiny_file(tmp_path)}", "optimizer.lr=0.05")
    assert cfg.optimizer.lr == 0.05
    with caplog.at_level("INFO", logger="elasticface.finetune.config"):
        resolve(cfg)
    said = [r.getMessage() for r in caplog.records if "in place of the recipe's" in r.getMessage()]
    assert said == ["finetune=recipe: typed optimizer.lr=0.05, in place of the recipe's optimizer.lr=0.01"]
