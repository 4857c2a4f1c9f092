"""insightface's MXNet model zoo in, without MXNet: golden embeddings computed by MXNet 1.9.1 itself.

tests/data/mxnet/make_golden.py (run in a separate MXNet environment) wrote a small random-weight LResNet-E-IR
("fresnet", float32) and a random-weight MobileFaceNet "y1" (its released layout, float16 arrays) with MXNet's own
``save_checkpoint``, and MXNet's ``fc1`` outputs for four RGB inputs. The files are read here with numpy only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from elasticface.backbones.mxnet_params import MXNetParamsError, read_mxnet_params
from elasticface.backbones.weights import WeightsError, file_kind
from elasticface.eval.embed import load_model_file

DATA = Path(__file__).parent / "data" / "mxnet"
GOLDEN = np.load(DATA / "golden.npz")
#: the fresnet test graph is narrower than any registered iresnet: its architecture is named, as a user would
FRESNET = {"_target_": "elasticface.backbones.iresnet.IResNet", "layers": [2, 1, 1, 1], "channels": [8, 16, 16, 32]}


def _ours(images: np.ndarray) -> torch.Tensor:
    """RGB uint8 NCHW -> this package's input, (x / 255 - 0.5) / 0.5."""
    return torch.from_numpy(images.astype(np.float32) / 255.0 * 2.0 - 1.0)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(DATA / name, out)
    return out


def _edit_symbol(folder: Path, edit) -> None:
    path = folder / "model-symbol.json"
    graph = json.loads(path.read_text())
    edit({n["name"]: n for n in graph["nodes"]})
    path.write_text(json.dumps(graph))


@pytest.mark.parametrize("name", ["y1", "fresnet"])
def test_embeddings_match_mxnet(name, capsys):
    backbone = FRESNET if name == "fresnet" else None
    model = load_model_file(str(DATA / name / "model-0000.params"), "cpu", backbone=backbone)
    with torch.no_grad():
        got = model(_ours(GOLDEN["images"])).numpy()
    want = GOLDEN[name]
    assert got.shape == want.shape
    assert (_cosines(got, want) >= 0.9999).all(), _cosines(got, want)
    if name == "y1":  # the released y1 layout is recognised from its tensors
        assert "inferred from its tensors: mobilefacenet_y1" in capsys.readouterr().out


def test_params_file_names_shapes_and_dtypes_follow_the_symbol():
    for name, dtype in (("y1", np.float16), ("fresnet", np.float32)):
        arrays = read_mxnet_params(str(DATA / name / "model-0000.params"))
        graph = json.loads((DATA / name / "model-symbol.json").read_text())
        variables = {n["name"] for n in graph["nodes"] if n["op"] == "null"} - {"data"}
        assert {k.split(":", 1)[1] for k in arrays} == variables
        assert all(k.startswith("aux:") == k.endswith(("_moving_mean", "_moving_var")) for k in arrays)
        assert all(a.dtype == dtype for a in arrays.values())
    arrays = read_mxnet_params(str(DATA / "y1" / "model-0000.params"))
    assert arrays["arg:conv_1_conv2d_weight"].shape == (64, 3, 3, 3)
    assert arrays["arg:fc1_weight"].shape == (128, 512) and arrays["arg:pre_fc1_bias"].shape == (128,)


def test_mobilefacenet_y1_has_the_parameters_of_mxnets_y1():
    """MXNet's y1 learns the same tensors, plus the embedding Linear's bias that the conversion folds away."""
    import timm

    arrays = read_mxnet_params(str(DATA / "y1" / "model-0000.params"))
    mxnet_count = sum(a.size for k, a in arrays.items() if k.startswith("arg:"))
    model = timm.create_model("mobilefacenet_y1")
    assert sum(p.numel() for p in model.parameters()) == mxnet_count - arrays["arg:pre_fc1_bias"].size == 1_003_136


def test_every_dtype_and_both_array_versions_read_as_mxnet_wrote_them():
    want = np.load(DATA / "arrays.npz")
    v2 = read_mxnet_params(str(DATA / "arrays_v2.params"))
    v3 = read_mxnet_params(str(DATA / "arrays_v3.params"))
    got = {**v2, **{f"v3_{k}": v for k, v in v3.items()}}
    assert sorted(got) == sorted(want.files)
    for key in want.files:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
        np.testing.assert_array_equal(got[key], want[key])
    assert v3["scalar"].shape == () and v3["scalar"] == np.float32(3.5)  # a 0-d array under numpy semantics


@pytest.mark.parametrize("cut", [0, 12, 20, 40, 1000, -7])
def test_truncated_params_file_is_refused_with_its_name(cut, tmp_path):
    folder = _copy("y1", tmp_path)
    params = folder / "model-0000.params"
    data = params.read_bytes()
    params.write_bytes(data[:cut])
    with pytest.raises((WeightsError, MXNetParamsError)) as err:
        read_mxnet_params(str(params))
    assert str(params) in str(err.value)
    assert ("truncated:" in str(err.value)) == (cut >= 16 or cut < 0)


def test_foreign_and_padded_files_are_refused(tmp_path):
    with pytest.raises(MXNetParamsError, match="not an MXNet NDArray file"):
        read_mxnet_params(str(DATA / "y1" / "model-symbol.json"))
    folder = _copy("fresnet", tmp_path)
    params = folder / "model-0000.params"
    params.write_bytes(params.read_bytes() + b"\0" * 8)
    with pytest.raises(MXNetParamsError, match="8 bytes after the last name"):
        read_mxnet_params(str(params))


def test_params_of_another_model_name_the_missing_array(tmp_path):
    folder = _copy("y1", tmp_path)
    shutil.copy(DATA / "fresnet" / "model-0000.params", folder / "model-0000.params")
    with pytest.raises(WeightsError, match=r"no array conv_1_conv2d_weight .*does not belong to model-symbol.json"):
        file_kind(str(folder / "model-0000.params"))


def test_params_without_symbol_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    shutil.copy(DATA / "y1" / "model-0000.params", tmp_path / "m" / "model-0000.params")
    with pytest.raises(WeightsError, match="needs its symbol .*model-symbol.json beside it"):
        load_model_file(str(tmp_path / "m" / "model-0000.params"), "cpu")


@pytest.mark.parametrize("edit, message", [
    (lambda n: n["conv_6sep_relu"].update(op="Pooling"), "layer conv_6sep_relu is a Pooling"),
    (lambda n: n["conv_6sep_relu"]["attrs"].update(act_type="leaky"), "layer conv_6sep_relu is a leaky activation"),
    (lambda n: n["dconv_23_conv_dw_conv2d"]["attrs"].update(stride="(1, 1)"),
     r"convolution dconv_23_conv_dw_conv2d has kernel, stride, pad, groups, dilation \(\(3, 3\), \(1, 1\)"),
    (lambda n: next(v for v in n.values() if v["op"] == "_minus_scalar")["attrs"].update(scalar="0"),
     "only an input centred on 127.5"),
    (lambda n: n["conv_1_conv2d"].update(name="first_conv2d"), "a symbol the mapping does not know"),
    (lambda n: n["res_4_block5_conv_dw_conv2d"].update(name="res_4_extra_conv_dw_conv2d"),
     "layer res_4_extra_conv_dw_conv2d .* has a name the fmobilefacenet"),
])
def test_symbol_the_mapping_does_not_know_is_refused_naming_the_layer(edit, message, tmp_path):
    folder = _copy("y1", tmp_path)
    _edit_symbol(folder, edit)
    with pytest.raises(WeightsError, match=message) as err:
        load_model_file(str(folder / "model-0000.params"), "cpu")
    assert str(folder) in str(err.value)


def test_export_pth_writes_insightface_layout_that_loads_strictly(tmp_path):
    import timm

    from elasticface.cli.export import main as export_main

    pth = tmp_path / "y1.pth"
    assert export_main(["--weights", str(DATA / "y1" / "model-0000.params"), "--format", "pth", "--out", str(pth)]) == 0
    state = torch.load(pth, weights_only=True)
    model = timm.create_model("mobilefacenet_y1").eval()  # 128-d by default, as released
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        got = model(_ours(GOLDEN["images"])).numpy()
    assert (_cosines(got, GOLDEN["y1"]) >= 0.9999).all()


def test_embed_command_takes_the_mxnet_files(tmp_path):
    from PIL import Image

    from elasticface.cli.embed import main as embed_main

    faces = tmp_path / "faces"
    faces.mkdir()
    for i, image in enumerate(GOLDEN["images"]):
        Image.fromarray(image.transpose(1, 2, 0)).save(faces / f"{i}.png")
    out = tmp_path / "emb.npy"
    assert embed_main([f"weights={DATA / 'y1' / 'model-0000.params'}", f"images={faces}", f"out={out}",
                       "flip=false"]) == 0
    emb = np.load(out)
    assert emb.shape == (4, 128)
    assert (_cosines(emb, GOLDEN["y1"]) >= 0.9999).all()
