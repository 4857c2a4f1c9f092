"""Face backbones in timm's registry, the FaceNeck path, and build_backbone's contract.

Large models are only constructed on the meta device (no memory, no init cost); forward passes run
on iresnet_tiny / iresnet18 / mobilefacenet / small timm models at batch 2.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import timm
import torch
from hydra.utils import instantiate
from torch import nn

import elasticface.backbones as B
from conftest import CONFIG_DIR, compose_train

# sum(p.numel() for p in model.parameters()) of insightface arcface_torch's r18/r34/r50/r100/r200
# (iresnet.py, num_features=512, 112x112) and get_mbf / get_mbf_large, including the embedding
# FC and the frozen-scale BN1d; counted on insightface's own code.
INSIGHTFACE_PARAMS = {
    "iresnet18": 24_025_600,
    "iresnet34": 34_139_328,
    "iresnet50": 43_590_848,
    "iresnet100": 65_156_160,
    "iresnet200": 118_833_920,
    "mobilefacenet": 2_059_520,
    "mobilefacenet_large": 6_314_880,
}
FACE = ["iresnet_tiny", *INSIGHTFACE_PARAMS]
CONFIGS = sorted(p.stem for p in Path(CONFIG_DIR, "backbone").glob("*.yaml"))


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _faces(batch: int = 2, size: int = 112) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))


def test_face_backbones_are_registered_with_timm():
    assert set(FACE) <= set(B.FACE_BACKBONES)
    for name in FACE:
        assert timm.is_model(name), name
        cfg = timm.models.get_pretrained_cfg(name)
        assert cfg.input_size == (3, 112, 112) and cfg.mean == (0.5, 0.5, 0.5) and cfg.num_classes == 0


@pytest.mark.parametrize("name", FACE)
def test_create_via_timm_and_build_backbone(name):
    with torch.device("meta"):
        model = timm.create_model(name, num_classes=0)
        built = B.build_backbone(name, embedding_size=256, dropout=0.1)
    assert model.embeds_faces and model.num_features == model.embedding_size == 512
    assert isinstance(model.get_classifier(), nn.Identity)
    assert type(built) is type(model) and built.embedding_size == built.num_features == 256


@pytest.mark.parametrize("name,expected", sorted(INSIGHTFACE_PARAMS.items()))
def test_parameter_counts_match_insightface(name, expected):
    with torch.device("meta"):
        model = timm.create_model(name)
    assert _n_params(model) == expected
    if name.startswith("iresnet"):  # insightface freezes only the embedding BN's scale
        frozen = [k for k, p in model.named_parameters() if not p.requires_grad]
        assert frozen == ["features.weight"]
        assert model.fc.in_features == 512 * 7 * 7


def test_state_dict_layout_matches_insightface():
    """Key names and shapes as in insightface, so its backbone.pth files load unchanged."""
    with torch.device("meta"):
        r18 = timm.create_model("iresnet18").state_dict()
        mbf = timm.create_model("mobilefacenet").state_dict()
    assert r18["conv1.weight"].shape == (64, 3, 3, 3)
    assert r18["layer1.0.downsample.0.weight"].shape == (64, 64, 1, 1)
    assert r18["layer4.1.prelu.weight"].shape == (512,)
    assert r18["fc.weight"].shape == (512, 25088) and "fc.bias" in r18
    # entry counts of insightface's r18 / mbf state dicts (incl. BN buffers)
    assert "features.running_var" in r18 and len(r18) == 187
    assert mbf["layers.1.layers.0.weight"].shape == (128, 2, 3, 3)  # insightface's groups=64 conv
    assert mbf["features.layers.0.layers.0.weight"].shape == (512, 1, 7, 7)
    assert mbf["features.layers.2.weight"].shape == (512, 512)
    assert "conv_sep.layers.2.weight" in mbf and len(mbf) == 333


@pytest.mark.parametrize("name", ["iresnet18", "mobilefacenet", "resnet18", "vit_tiny_patch16_224"])
def test_embedder_output_shape(name):
    model = B.build_backbone(name).eval()
    with torch.no_grad():
        out = model(_faces())
    assert out.shape == (2, 512) and torch.isfinite(out).all()
    assert model.embedding_size == 512
    if name.startswith("vit"):  # img_size=112 reached the ViT: patch 16 -> 7x7 tokens
        assert tuple(model.body.patch_embed.grid_size) == (7, 7)


def test_face_backbone_path_has_no_neck():
    model = B.build_backbone("iresnet_tiny", embedding_size=128, dropout=0.2)
    assert isinstance(model, B.IResNet) and model.dropout.p == 0.2
    assert timm.create_model("iresnet_tiny", drop_rate=0.3).dropout.p == 0.3  # timm's name for it
    assert not any(isinstance(m, B.FaceNeck) for m in model.modules())
    model.eval()
    with torch.no_grad():
        assert model(_faces()).shape == (2, 128)


def test_generic_timm_model_gets_the_neck():
    model = B.build_backbone("mobilenetv3_small_050", embedding_size=64, dropout=0.3)
    assert isinstance(model, B.TimmEmbedder) and isinstance(model.neck, B.FaceNeck)
    assert model.embeds_faces and model.embedding_size == 64
    # mobilenetv3's pooled output is its 1024-d head, not num_features (288)
    assert model.neck.in_features == model.body.head_hidden_size == 1024
    assert model.neck.dropout.p == 0.3 and model.body.num_classes == 0
    model.eval()
    with torch.no_grad():
        assert model(_faces()).shape == (2, 64)


@pytest.mark.parametrize(
    "name, shift",
    [
        ("iresnet_tiny", "features.bias"),
        ("mobilefacenet", "features.layers.3.bias"),
        ("resnet10t", "neck.features.bias"),
    ],
)
def test_embedding_shift_false_holds_the_embedding_bn_centred(name, shift):
    # the toy example's 2-D embedding: a learned shift would move the cloud off the origin (docs/toy_example.md)
    torch.manual_seed(0)
    model = B.build_backbone(name, embedding_size=2, embedding_shift=False)
    frozen = [k for k, p in model.named_parameters() if not p.requires_grad]
    assert shift in frozen and len(frozen) <= 2  # the shift, and the scale where insightface fixes it too
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, weight_decay=5e-4)
    for _ in range(2):
        optimizer.zero_grad()
        model(_faces()).sum().backward()
        optimizer.step()
    assert torch.count_nonzero(model.get_parameter(shift)) == 0
    model.train()
    with torch.no_grad():
        embeddings = model(torch.randn(16, 3, 112, 112))
    assert embeddings.mean(0).abs().max() < 1e-5  # batch statistics centre it exactly
    default = B.build_backbone(name, embedding_size=2)
    assert default.get_parameter(shift).requires_grad  # insightface's default: the shift trains


def test_img_size_is_dropped_for_models_without_it():
    resnet = B.build_backbone("resnet10t", img_size=112)  # ResNet's constructor has no img_size
    assert isinstance(resnet, B.TimmEmbedder) and resnet.neck.in_features == 512


def test_face_neck_rejects_unpooled_features():
    neck = B.FaceNeck(16, embedding_size=8)
    with pytest.raises(ValueError, match=r"\[B, 16\]"):
        neck(torch.randn(2, 16, 3, 3))
    assert [k for k, p in neck.named_parameters() if not p.requires_grad] == ["features.weight"]


def test_unknown_name_lists_close_matches():
    with pytest.raises(ValueError) as info:
        B.build_backbone("iresnet05")
    msg = str(info.value)
    assert "iresnet05" in msg and "iresnet50" in msg and "timm.list_models()" in msg
    with pytest.raises(ValueError, match="resnet18"):
        B.build_backbone("resnt18")
    assert "vit_tiny_patch16_224" in B.suggest_backbones("vit_tiny")  # a prefix finds the full name


def test_build_backbone_refuses_a_classifier():
    with pytest.raises(ValueError, match="num_classes"):
        B.build_backbone("iresnet_tiny", num_classes=10)


def test_pretrained_points_to_checkpoint_path():
    with pytest.raises(ValueError, match="checkpoint_path"):
        timm.create_model("iresnet50", pretrained=True)


def test_checkpoint_path_loads_a_plain_state_dict(tmp_path):
    src = timm.create_model("iresnet_tiny").eval()
    path = tmp_path / "backbone.pth"
    torch.save(src.state_dict(), path)
    dst = B.build_backbone("iresnet_tiny", checkpoint_path=str(path)).eval()
    with torch.no_grad():
        torch.testing.assert_close(dst(_faces()), src(_faces()))


@pytest.mark.parametrize("name", ["iresnet_tiny", "resnet10t"])
def test_eval_mode_is_deterministic(name):
    model = B.build_backbone(name, dropout=0.5).eval()
    x = _faces()
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)


def test_num_classes_adds_a_classifier():
    model = timm.create_model("iresnet_tiny", num_classes=10).eval()
    assert isinstance(model.get_classifier(), nn.Linear) and model.get_classifier().in_features == 512
    x = _faces()
    with torch.no_grad():
        logits = model(x)
        emb = model.forward_head(model.forward_features(x), pre_logits=True)
    assert logits.shape == (2, 10) and emb.shape == (2, 512)
    assert model.forward_features(x).shape == (2, 128, 7, 7)
    model.reset_classifier(0)
    with torch.no_grad():
        torch.testing.assert_close(model(x), emb)


def test_features_only_and_grad_checkpointing():
    feats = timm.create_model("iresnet_tiny", features_only=True)
    assert feats.feature_info.reduction() == [2, 2, 4, 8, 16]
    assert [f.shape[-1] for f in feats(_faces())] == [56, 56, 28, 14, 7]

    model = timm.create_model("iresnet_tiny")
    x = _faces(4)
    plain = model(x)
    plain.square().sum().backward()
    grad = model.conv1.weight.grad.clone()
    model.zero_grad()
    model.set_grad_checkpointing(True)
    ckpt = model(x)
    ckpt.square().sum().backward()
    torch.testing.assert_close(ckpt, plain)
    torch.testing.assert_close(model.conv1.weight.grad, grad)


def test_trace_matches_eager():
    """Export (ONNX / TorchScript) traces the embedder: the face backbone and the neck must trace."""
    model = B.build_backbone("iresnet_tiny").eval()
    neck = B.FaceNeck(16, embedding_size=8).eval()
    x, feats = _faces(), torch.randn(2, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated", category=FutureWarning)
        warnings.simplefilter("error", torch.jit.TracerWarning)  # the neck's shape check must not leak
        torch.testing.assert_close(torch.jit.trace(model, x, check_trace=False)(x), model(x))
        torch.testing.assert_close(torch.jit.trace(neck, feats, check_trace=False)(feats), neck(feats))


def test_backbone_configs_exist():
    expected = {
        "iresnet18", "iresnet34", "iresnet50", "iresnet100", "iresnet200", "mobilefacenet",
        "resnet18", "mobilenetv3_small_100", "convnext_atto", "vit_tiny", "tiny",
    }
    assert expected <= set(CONFIGS)


@pytest.mark.parametrize("option", CONFIGS)
def test_backbone_config_composes(option):
    cfg = compose_train([f"backbone={option}", "model.embedding_size=128"])
    node = cfg.model.backbone
    assert node._target_ == "elasticface.backbones.build_backbone"
    assert node.embedding_size == 128 and timm.is_model(node.name)


def test_tiny_config_instantiates_a_fast_face_backbone():
    cfg = compose_train(["backbone=tiny", "model.embedding_size=64"])
    model = instantiate(cfg.model.backbone).eval()
    assert isinstance(model, B.IResNet) and model.embedding_size == 64
    with torch.no_grad():
        assert model(_faces()).shape == (2, 64)
