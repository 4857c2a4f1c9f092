"""Released weights in, insightface-format weights out.

The files here are state_dicts written from insightface's and ElasticFace's architecture description
(tests/helpers/insightface_layout.py), with and without DDP's `module.` prefix, never by saving this
project's own models: loading them checks the project against the published layout.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

import elasticface.backbones as B
from conftest import ROOT, compose_eval
from elasticface.backbones.weights import (
    WeightsError,
    backbone_state_dict,
    file_kind,
    infer_backbone,
    layout_of,
    load_backbone_weights,
)
from elasticface.eval.embed import load_model_file

sys.path.insert(0, str(Path(__file__).parent))
from helpers.insightface_layout import (  # noqa: E402
    IRESNET_BLOCKS,
    KEY_COUNTS,
    TINY,
    iresnet_layout,
    mobilefacenet_layout,
    released_state_dict,
)


def _meta(layout) -> dict[str, torch.Tensor]:
    return {k: torch.empty(shape, device="meta") for k, shape in layout.items()}


def _save(path: Path, state: dict) -> str:
    torch.save(state, path)
    return str(path)


def _faces(n: int = 2) -> torch.Tensor:
    return torch.rand(n, 3, 112, 112, generator=torch.Generator().manual_seed(3)) * 2 - 1


def _tiny_file(tmp_path: Path, embedding_size: int = 32, prefix: str = "", seed: int = 0) -> str:
    layout = iresnet_layout(embedding_size=embedding_size, **TINY)
    return _save(tmp_path / f"tiny{embedding_size}{prefix.strip('.')}.pth", released_state_dict(layout, seed, prefix))


# -- the oracle itself -----------------------------------------------------------------------------------


def test_spec_layouts_have_the_published_key_counts():
    assert len(iresnet_layout(IRESNET_BLOCKS["iresnet50"])) == KEY_COUNTS["iresnet50"]
    assert len(iresnet_layout(IRESNET_BLOCKS["iresnet100"])) == KEY_COUNTS["iresnet100"]
    assert len(mobilefacenet_layout()) == KEY_COUNTS["mobilefacenet"]


# -- loading released files ------------------------------------------------------------------------------


@pytest.mark.parametrize("name,prefix", [("iresnet18", "module."), ("mobilefacenet", ""),
                                         pytest.param("iresnet18", "", marks=pytest.mark.slow),
                                         pytest.param("iresnet50", "module.", marks=pytest.mark.slow),
                                         pytest.param("mobilefacenet", "module.", marks=pytest.mark.slow)])
def test_released_file_loads_strictly_into_the_same_named_backbone(name, prefix, tmp_path):
    layout = mobilefacenet_layout() if name == "mobilefacenet" else iresnet_layout(IRESNET_BLOCKS[name])
    state = released_state_dict(layout, seed=1, prefix=prefix)
    path = _save(tmp_path / "backbone.pth", state)
    assert file_kind(path) == "state_dict"
    model = B.build_backbone(name)
    report = load_backbone_weights(model, path)
    assert report.prefix_removed == prefix and report.loaded == len(layout)
    assert report.sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    got = model.state_dict()
    assert set(got) == set(layout)
    for key, value in state.items():
        assert torch.equal(got[key[len(prefix):]], value), key
    # and written back in the same layout, fp32, no prefix
    written = backbone_state_dict(model)
    assert list(written) == list(got) and all(written[k].dtype == state[prefix + k].dtype for k in written)


@pytest.mark.parametrize("name", [*IRESNET_BLOCKS, "mobilefacenet", "mobilefacenet_large"])
def test_architecture_is_inferred_from_the_tensors(name):
    if name.startswith("mobilefacenet"):
        layout = mobilefacenet_layout((2, 8, 12, 4), 4) if name.endswith("large") else mobilefacenet_layout()
    else:
        layout = iresnet_layout(IRESNET_BLOCKS[name], embedding_size=256)
    state = _meta(layout)
    assert infer_backbone(state, "x.pth") == name
    assert layout_of(state).embedding_size == (256 if name.startswith("iresnet") else 512)


def test_eval_takes_a_state_dict_and_infers_tiny_or_uses_the_named_backbone(tmp_path, capsys):
    path = _tiny_file(tmp_path, prefix="module.")
    model = load_model_file(path, "cpu")
    assert "inferred from its tensors: iresnet_tiny" in capsys.readouterr().out
    named = load_model_file(path, "cpu", backbone={"_target_": "elasticface.backbones.build_backbone",
                                                   "name": "iresnet_tiny", "dropout": 0.0})
    with torch.no_grad():
        # exact: the same architecture and weights run the same ops on the same batch
        torch.testing.assert_close(model(_faces()), named(_faces()), rtol=0, atol=0)
    assert model(_faces()).shape == (2, 32)


def test_eval_backbone_option_composes():
    """`python eval.py backbone=iresnet100` used to fail with "No match in the defaults list"."""
    cfg = compose_eval(["backbone=iresnet100", "weights=x.pth"])
    from elasticface.eval.run import backbone_option

    assert backbone_option(cfg) == {"_target_": "elasticface.backbones.build_backbone", "name": "iresnet100",
                                    "dropout": 0.0}


def test_any_timm_backbone_takes_its_own_state_dict(tmp_path):
    """A timm model's own weights (with its ImageNet classifier) start the body; the classifier is reported."""
    source = timm.create_model("resnet10t", num_classes=7)
    path = _save(tmp_path / "resnet10t.pth", source.state_dict())
    model = B.build_backbone("resnet10t", embedding_size=16)
    report = load_backbone_weights(model, path)
    assert report.skipped["timm_classifier"] == ["fc.weight", "fc.bias"]
    for key, value in model.body.state_dict().items():
        assert torch.equal(value, source.state_dict()[key])
    # and export writes body.* / neck.*, which loads back strictly
    again = B.build_backbone("resnet10t", embedding_size=16)
    load_backbone_weights(again, _save(tmp_path / "export.pth", backbone_state_dict(model)))
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))


# -- bad input -------------------------------------------------------------------------------------------


def test_whole_pickled_model_is_refused(tmp_path):
    path = _save(tmp_path / "model.pth", torch.nn.Linear(2, 2))
    with pytest.raises(WeightsError, match=r"model\.pth: holds a pickled Python object \(torch\.nn\.modules\.linear"):
        load_backbone_weights(B.build_backbone("iresnet_tiny"), path)


def test_lightning_checkpoint_as_weights_is_refused(tmp_path):
    path = _save(tmp_path / "last.ckpt", {"state_dict": {"backbone.conv1.weight": torch.zeros(1)}, "epoch": 3,
                                         "global_step": 12, "pytorch-lightning_version": "2.6.0"})
    assert file_kind(path) == "lightning"
    with pytest.raises(WeightsError, match=r"last\.ckpt: a Lightning checkpoint .*ckpt_path=.*--format pth"):
        load_backbone_weights(B.build_backbone("iresnet_tiny"), path)


def test_truncated_file_is_refused(tmp_path):
    whole = Path(_tiny_file(tmp_path)).read_bytes()
    path = tmp_path / "cut.pth"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(WeightsError, match=r"cut\.pth: .*truncated or corrupt"):
        load_model_file(str(path), "cpu")


def test_not_a_state_dict_is_refused(tmp_path):
    path = _save(tmp_path / "list.pth", [torch.zeros(2)])
    with pytest.raises(WeightsError, match=r"list\.pth: expected a state_dict .* found a builtins\.list"):
        load_backbone_weights(B.build_backbone("iresnet_tiny"), path)


def test_embedding_size_mismatch_is_refused(tmp_path):
    path = _tiny_file(tmp_path, embedding_size=64)
    with pytest.raises(WeightsError, match=r"tiny64\.pth: holds a 64-d embedding .* model\.embedding_size=32"):
        load_backbone_weights(B.build_backbone("iresnet_tiny", embedding_size=32), path)


def test_elasticface_se_file_is_refused_by_plain_iresnet(tmp_path):
    layout = iresnet_layout(embedding_size=32, se=True, **TINY)
    path = _save(tmp_path / "se.pth", released_state_dict(layout))
    for load in (lambda: load_backbone_weights(B.build_backbone("iresnet_tiny", embedding_size=32), path),
                 lambda: load_backbone_weights(B.build_backbone("iresnet_tiny", embedding_size=32), path,
                                               strict=False)):
        with pytest.raises(WeightsError, match=r"se\.pth: an ElasticFace SE=True model .*layer1\.0\.se_block\.fc1"):
            load()
    with pytest.raises(WeightsError, match=r"se\.pth: cannot tell .*SE blocks"):
        load_model_file(path, "cpu")


def test_named_architecture_that_does_not_fit_names_what_the_file_looks_like(tmp_path):
    path = _save(tmp_path / "r18.pth", released_state_dict(iresnet_layout(IRESNET_BLOCKS["iresnet18"])))
    with pytest.raises(WeightsError) as info:
        load_backbone_weights(B.build_backbone("iresnet34"), path)
    msg = str(info.value)
    assert "r18.pth: does not fit iresnet34" in msg and "looks like iresnet18" in msg
    assert "Missing keys: layer1.2.bn1.weight" in msg and "Unexpected keys: none" in msg
    # another architecture is named as such, even when the embedding size differs too
    with pytest.raises(WeightsError, match=r"r18\.pth: does not fit iresnet_tiny .*looks like iresnet18"):
        load_backbone_weights(B.build_backbone("iresnet_tiny", embedding_size=32), path)


def test_non_strict_loads_what_fits_and_reports_the_rest(tmp_path):
    state = released_state_dict(iresnet_layout(embedding_size=32, **TINY))
    state.pop("layer4.0.prelu.weight")
    state["extra.weight"] = torch.zeros(3)
    path = _save(tmp_path / "partial.pth", state)
    model = B.build_backbone("iresnet_tiny", embedding_size=32)
    with pytest.raises(WeightsError, match="Missing keys: layer4.0.prelu.weight.*Unexpected keys: extra.weight"):
        load_backbone_weights(model, path)
    before = model.layer4[0].prelu.weight.clone()
    report = load_backbone_weights(model, path, strict=False)
    assert report.skipped["missing"] == ["layer4.0.prelu.weight"] and report.skipped["unexpected"] == ["extra.weight"]
    assert torch.equal(model.layer4[0].prelu.weight, before) and torch.equal(model.conv1.weight, state["conv1.weight"])


def test_exported_models_are_refused_as_training_weights(tmp_path):
    path = str(tmp_path / "model.pt")
    torch.jit.script(torch.nn.Linear(2, 2)).save(path)
    assert file_kind(path) == "torchscript"
    with pytest.raises(WeightsError, match=r"model\.pt: an exported torchscript model"):
        load_backbone_weights(B.build_backbone("iresnet_tiny", embedding_size=32), path)


# -- training from a file --------------------------------------------------------------------------------


def test_train_refuses_a_bad_file_before_reading_data(tiny_cfg, tmp_path):
    from elasticface.training import run

    bad = _tiny_file(tmp_path, embedding_size=64)  # an embedding size the command line names otherwise
    cfg = tiny_cfg("data=folder", f"data.root={tmp_path / 'no_such_folder'}", f"weights={bad}",
                   "model.embedding_size=32")
    with pytest.raises(WeightsError, match="tiny64.pth: holds a 64-d embedding .* model.embedding_size=32"):
        run(cfg)


def test_eval_refuses_a_bad_file_before_reading_data(tmp_path):
    from elasticface.eval.run import evaluate

    layout = iresnet_layout(embedding_size=32, se=True, **TINY)
    path = _save(tmp_path / "se.pth", released_state_dict(layout))
    cfg = compose_eval(["backbone=tiny", f"weights={path}", f"data.val_root={tmp_path / 'no_such_folder'}",
                        "device=cpu"])
    with pytest.raises(WeightsError, match=r"se\.pth: an ElasticFace SE=True model"):
        evaluate(cfg, output_dir=str(tmp_path / "out"))


def test_finetune_from_file_frozen_bn_and_backbone_lr(tiny_cfg, tmp_path):
    """weights= starts the backbone from the file; backbone_lr_scale=0 and freeze_backbone_bn keep every backbone
    tensor as loaded while the class centres train; summary.json records the file and its SHA-256, and the loaded
    weights' accuracy before the first step (baseline/start_acc), which the unchanged backbone must score again
    through training's own validation loop."""
    from elasticface.run_summary import format_summary
    from elasticface.training import run

    path = _tiny_file(tmp_path, prefix="module.", seed=5)
    cfg = tiny_cfg(f"weights={path}", "finetune.backbone_lr_scale=0.0", "finetune.freeze_backbone_bn=true",
                   "trainer.max_epochs=1", "trainer.limit_train_batches=2", "logger=[]", "pixel_baseline=false")
    summary = run(cfg)
    assert summary["weights"]["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert summary["weights"]["file"] == path and summary["weights"]["prefix_removed"] == "module."
    saved = json.loads((Path(cfg.paths.output_dir) / "summary.json").read_text())
    assert saved["weights"]["sha256"] == summary["weights"]["sha256"]
    assert saved["baseline/start_acc"] == saved["val/acc_mean"]["final"] == saved["val/sets"]["synthetic"]
    assert saved["baseline/start_acc_per_set"] == {"synthetic": saved["baseline/start_acc"]}
    assert "change from the loaded weights: +0.00 points" in format_summary(saved)
    ckpt = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)
    released = torch.load(path, weights_only=True)
    for key, value in released.items():
        assert torch.equal(ckpt["state_dict"]["backbone." + key[len("module."):]], value), key
    groups = ckpt["optimizer_states"][0]["param_groups"]
    assert [g["name"] for g in groups] == ["backbone", "centers_head"] and groups[0]["lr"] == 0.0


def test_param_groups_and_frozen_bn_modes(tiny_cfg):
    from elasticface.finetune.config import resolve
    from elasticface.finetune.phases import FineTuning
    from elasticface.training import build_module

    cfg = tiny_cfg("finetune.backbone_lr_scale=0.1", "finetune.freeze_backbone_bn=true")
    model = build_module(cfg, num_classes=5)
    tuning = FineTuning(**cfg.finetune)
    tuning.setup(None, model, "fit")  # before the optimizer is built
    groups = model.param_groups()
    lr = model.hparams.optimizer["lr"]
    assert groups[0]["lr"] == pytest.approx(0.1 * lr) and "lr" not in groups[1]
    assert {id(p) for p in groups[0]["params"]} == {id(p) for p in model.backbone.parameters()}
    assert len(groups[0]["params"]) + len(groups[1]["params"]) == len(list(model.parameters()))
    model.train()
    tuning.on_train_epoch_start(None, model)
    bns = [m for m in model.backbone.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert bns and not any(m.training for m in bns) and model.backbone.training and model.centers.training

    with pytest.raises(ValueError, match="finetune.backbone_lr_scale=-1"):  # at start-up, before any data is read
        resolve(tiny_cfg("finetune.backbone_lr_scale=-1"))


# -- round trips -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny trained checkpoint and a .bin set to evaluate it on."""
    import subprocess

    from elasticface.data.pair_files import write_bin

    root = tmp_path_factory.mktemp("roundtrip")
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=tiny", "trainer.max_epochs=1", "logger=[]",
                          f"hydra.run.dir={root / 'run'}"], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rng = np.random.default_rng(0)
    images, issame = [], []
    for p in range(16):
        a = rng.integers(0, 256, (112, 112, 3), dtype=np.uint8)
        b = np.clip(a.astype(int) + rng.integers(-40, 41, a.shape), 0, 255).astype(np.uint8) if p % 2 == 0 else \
            rng.integers(0, 256, (112, 112, 3), dtype=np.uint8)
        images += [a, b]
        issame.append(p % 2 == 0)
    (root / "bins").mkdir()
    write_bin(str(root / "bins" / "lfw.bin"), images, issame)
    return root / "run" / "checkpoints" / "last.ckpt", root / "bins"


def _eval(weights: str, bins: Path, out: Path, *extra: str) -> list[dict]:
    from elasticface.eval.run import evaluate

    cfg = compose_eval([f"weights={weights}", f"data.val_root={bins}", "data.val_sets=[lfw]", "device=cpu",
                        "num_workers=0", "plots=false", *extra])
    return evaluate(cfg, output_dir=str(out))


@pytest.mark.slow
def test_train_export_pth_eval_gives_the_ckpt_accuracy(trained, tmp_path):
    from elasticface.cli.export import main as export_main

    ckpt, bins = trained
    pth = tmp_path / "backbone.pth"
    assert export_main(["--weights", str(ckpt), "--format", "pth", "--out", str(pth)]) == 0
    state = torch.load(pth, weights_only=True)
    spec = iresnet_layout(embedding_size=32, **TINY)  # debug=tiny: iresnet_tiny, 32-d
    assert list(state) == list(spec) and all(tuple(state[k].shape) == spec[k] for k in spec)
    assert all(v.dtype in (torch.float32, torch.int64) and v.device.type == "cpu" for v in state.values())
    from_ckpt = _eval(str(ckpt), bins, tmp_path / "a")
    from_pth = _eval(str(pth), bins, tmp_path / "b", "backbone=tiny")
    assert from_pth[0]["acc"] == from_ckpt[0]["acc"] and from_pth[0]["threshold"] == from_ckpt[0]["threshold"]


@pytest.mark.slow
def test_onnx_round_trip_from_ckpt_and_from_state_dict(trained, tmp_path):
    pytest.importorskip("onnxruntime")
    from elasticface.cli.export import main as export_main

    ckpt, bins = trained
    pth, onnx_path = tmp_path / "backbone.pth", tmp_path / "model.onnx"
    assert export_main([f"weights={ckpt}", f"out={pth}"]) == 0
    assert export_main(["--weights", str(pth), "--out", str(onnx_path)]) == 0  # a state_dict in, ONNX out
    want = _eval(str(ckpt), bins, tmp_path / "a")[0]
    got = _eval(str(onnx_path), bins, tmp_path / "b")[0]
    assert abs(got["acc"] - want["acc"]) <= 1 / 16 + 1e-9  # onnxruntime's kernels: at most one pair moves
    x = _faces(3)
    module = load_model_file(str(ckpt), "cpu")
    with torch.no_grad():
        torch.testing.assert_close(load_model_file(str(onnx_path), "cpu")(x), module(x), atol=1e-3, rtol=1e-3)


def test_embed_cli_takes_a_state_dict(tmp_path, capsys):
    from PIL import Image

    from elasticface.cli.embed import main as embed_main

    faces = tmp_path / "faces"
    faces.mkdir()
    for i in range(3):
        Image.fromarray(np.full((112, 112, 3), 40 * i, dtype=np.uint8)).save(faces / f"{i}.png")
    path = _tiny_file(tmp_path, prefix="module.")
    assert embed_main(["--weights", path, "--backbone", "iresnet_tiny", "--images", str(faces),
                       "--out", str(tmp_path / "emb.npy")]) == 0
    emb = np.load(tmp_path / "emb.npy")
    assert emb.shape == (3, 32) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert embed_main([f"weights={path}", f"images={faces}", f"out={tmp_path / 'emb2.npy'}"]) == 0
    assert "inferred from its tensors: iresnet_tiny" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(tmp_path / "emb2.npy"), emb)  # the same model and batches: the same bits
