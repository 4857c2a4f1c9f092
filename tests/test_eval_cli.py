"""`python eval.py`: .bin sets, a pairs-file folder and an IJB directory, from a checkpoint or an export."""

from __future__ import annotations

import csv
import json
import logging
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, compose_eval
from elasticface.data.pair_files import write_bin
from elasticface.export import export_onnx, export_torchscript
from helpers.face_pairs import noisy_pairs
from helpers.pool_embedder import PoolEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaldata")
    bins = root / "bins"
    bins.mkdir()
    for i, name in enumerate(["lfw", "cfp_fp"]):
        write_bin(str(bins / f"{name}.bin"), *noisy_pairs(20 + 3 * i, seed=i))
    folder = root / "folder"
    folder.mkdir()
    images, issame = noisy_pairs(12, seed=5)
    lines = []
    for p, same in enumerate(issame):
        for k in range(2):
            Image.fromarray(images[2 * p + k]).save(folder / f"{p}_{k}.png")
        lines.append(f"{p}_0.png {p}_1.png {int(same)}")
    (root / "pairs.txt").write_text("\n".join(lines) + "\n")
    from helpers.ijb_files import make_ijb

    make_ijb(str(root / "ijb"))
    model = PoolEmbedder().eval()
    export_torchscript(model, str(root / "model.pt"))
    export_onnx(model, str(root / "model.onnx"))
    return root


def test_eval_cli_end_to_end(eval_data, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "eval.py"), f"weights={eval_data / 'model.pt'}", "allow_torchscript=true",
           f"data.val_root={eval_data / 'bins'}", f"pairs_file={eval_data / 'pairs.txt'}",
           f"image_root={eval_data / 'folder'}", f"ijb.root={eval_data / 'ijb'}",
           "ijb.target=IJBC", "device=cpu", "num_workers=0", "batch_size=16", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "agedb_30" in proc.stderr + proc.stdout  # the missing default set is reported
    results = json.loads((out / "results.json").read_text())["results"]
    names = [r["benchmark"] for r in results]
    assert names == ["lfw", "cfp_fp", "pairs", "IJBC"]
    for r in results[:3]:
        assert r["acc"] >= 0.9 and set(r) >= {"acc", "acc_std", "threshold", "tar_at_far_1e-3", "xnorm", "pairs"}
    assert results[1]["pairs"] == 23 and "tar_at_far_1e-4" in results[3]
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["benchmark"] for r in rows] == names
    assert (out / "roc.png").exists() and (out / "scores_lfw.png").exists()
    assert "lfw" in proc.stdout and "IJBC" in proc.stdout
    # each embedding pass says what it embeds and how long it took (a line every tenth or 30 s when it is long)
    said = proc.stdout + proc.stderr
    assert re.search(r"lfw: embedding the (\d+) distinct faces of 20 pairs: \1 images in \d+\.\d s", said), said[-3000:]
    assert re.search(r"cfp_fp: embedding the (\d+) distinct faces of 23 pairs: \1 images in \d+\.\d s", said), \
        said[-3000:]
    assert re.search(r"IJB IJBC: embedding the images of [\d,]+ templates: [\d,]+ images in \d+\.\d s", said)
    assert re.search(r"lfw: acc \d\.\d{4} \+- \d\.\d{4}", said)  # the result line scripts read, as before


def test_a_set_too_small_for_ten_folds_is_one_line_before_any_embedding(eval_data, tmp_path):
    """A .bin of 6 pairs cannot carry the 10-fold protocol: eval.py says so in one line naming the file (exit 2),
    where it used to end in kfold_bounds' traceback after embedding the set."""
    bins = tmp_path / "bins"
    bins.mkdir()
    write_bin(str(bins / "lfw.bin"), *noisy_pairs(6, seed=1))
    cmd = [sys.executable, str(ROOT / "eval.py"), f"weights={eval_data / 'model.pt'}", "allow_torchscript=true",
           f"data.val_root={bins}", "device=cpu", "num_workers=0", f"hydra.run.dir={tmp_path / 'out'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"elasticface-eval: error: {bins / 'lfw.bin'}: pair set 'lfw' holds 6 pairs (3 matched, 3 mismatched); the "
        "10-fold protocol needs at least 10 pairs, matched and mismatched both (LFW's has 6,000, half of each)")
    assert "Traceback" not in proc.stderr and "embedding the" not in proc.stdout + proc.stderr


def test_eval_onnx_matches_torchscript_in_process(eval_data, tmp_path):
    from elasticface.eval.run import evaluate

    base = [f"data.val_root={eval_data / 'bins'}", "data.val_sets=[lfw]", "device=cpu", "num_workers=0", "plots=false"]
    a = evaluate(compose_eval(base + [f"weights={eval_data / 'model.onnx'}"]), output_dir=str(tmp_path / "a"))
    b = evaluate(compose_eval(base + [f"weights={eval_data / 'model.pt'}", "allow_torchscript=true"]),
                 output_dir=str(tmp_path / "b"))
    assert a[0]["acc"] == b[0]["acc"] and a[0]["xnorm"] == pytest.approx(b[0]["xnorm"], rel=1e-4)


def test_eval_without_sources_is_a_clear_error(tmp_path):
    from elasticface.eval.run import evaluate

    with pytest.raises(ValueError, match="nothing to evaluate"):
        evaluate(compose_eval(["weights=x.pt"]), output_dir=str(tmp_path))


def _tiny_checkpoint(path, *overrides):
    """A FaceRecognitionModule checkpoint built from the tiny training config (no training)."""
    import pytorch_lightning as pl
    from conftest import compose_train

    from elasticface.training import build_module

    cfg = compose_train(["model.embedding_size=32", *overrides])
    module = build_module(cfg, num_classes=8)
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                "pytorch-lightning_version": pl.__version__}, path)
    return module


def test_training_validation_and_eval_embed_faces_identically(eval_data):
    """One flip fusion: the LightningModule's validation_step feeds the metric exactly what eval.py embeds."""
    from conftest import compose_train

    from torch.utils.data import Subset

    from elasticface.data.pair_files import find_bin_sets
    from elasticface.data.transforms import normalize
    from elasticface.eval.embedding_loop import embed_dataset
    from elasticface.metrics.verification import VerificationAccuracy
    from elasticface.training import build_module

    module = build_module(compose_train(["model.embedding_size=32"]), num_classes=8).eval()
    pairs = find_bin_sets(str(eval_data / "bins"), ["lfw"])["lfw"]
    first = Subset(pairs, range(6))  # the first 3 pairs
    images = torch.stack([image for image, _ in first])
    module.val_metrics["lfw"] = VerificationAccuracy(pairs.issame)
    with torch.no_grad():
        module.validation_step((normalize(images), torch.arange(6)), 0)
    emb, idx = embed_dataset(module, first, batch_size=6, device="cpu")
    assert idx.tolist() == list(range(6))
    # to the bit: the same flip-fused forward on the same batch of 6, same threads and kernels
    assert torch.equal(module.val_metrics["lfw"].embeddings[0], emb)


def test_eval_and_export_from_checkpoint(eval_data, tmp_path):
    pytest.importorskip("elasticface.training")
    from elasticface.cli.export import main as export_main
    from elasticface.eval.run import evaluate

    ckpt = str(tmp_path / "tiny.ckpt")
    module = _tiny_checkpoint(ckpt)
    rows = evaluate(compose_eval([f"weights={ckpt}", f"data.val_root={eval_data / 'bins'}", "data.val_sets=[lfw]",
                              "device=cpu", "num_workers=0", "plots=false"]), output_dir=str(tmp_path / "ckpt"))
    assert rows[0]["benchmark"] == "lfw" and 0.0 <= rows[0]["acc"] <= 1.0
    onnx_path = str(tmp_path / "tiny.onnx")
    assert export_main(["--ckpt", ckpt, "--out", onnx_path, "--torchscript", str(tmp_path / "tiny.pt")]) == 0
    import onnxruntime as ort

    x = torch.rand(3, 3, 112, 112) * 2 - 1
    got = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(None, {"images": x.numpy()})[0]
    with torch.no_grad():
        want = module.eval().embed(x).numpy()
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_eval_of_a_checkpoint_trained_at_56_pixels_resizes_to_56(eval_data, tmp_path, caplog):
    """experiment=lfw_fold10 trains at data.image_size=56: eval.py on its checkpoint, with no data.image_size, feeds
    56x56 faces (the backbone's FC expects them; 112 failed with a shape error) and says so."""
    from elasticface.eval.run import evaluate

    ckpt = str(tmp_path / "tiny56.ckpt")
    _tiny_checkpoint(ckpt, "experiment=lfw_fold10", "data.root=unused")
    base = [f"weights={ckpt}", f"data.val_root={eval_data / 'bins'}", "data.val_sets=[lfw]", "device=cpu",
            "num_workers=0", "plots=false"]
    with caplog.at_level(logging.INFO):
        rows = evaluate(compose_eval(base), output_dir=str(tmp_path / "a"))
    assert rows[0]["pairs"] == 20 and "faces resized to 56x56" in caplog.text
    with pytest.raises(RuntimeError, match="shape"):  # an explicit size is used as given
        evaluate(compose_eval(base + ["data.image_size=112"]), output_dir=str(tmp_path / "b"))


def test_eval_runs_mobilefacenet_nhwc_on_a_cpu_as_training_does(eval_data, tmp_path, caplog):
    """channels_last=auto takes training's layout rule (utils/speed.py): a MobileFaceNet state_dict embeds NHWC on a
    CPU (y1: 1.6-1.7x NCHW's faces/s), the same embeddings to float rounding; false keeps NCHW, also for a checkpoint
    trained NHWC; a bad value names the key."""
    import timm

    from elasticface.eval.embed import load_model_file
    from elasticface.eval.run import evaluate

    torch.manual_seed(0)
    pth = str(tmp_path / "backbone.pth")
    torch.save(timm.create_model("mobilefacenet_y1", embedding_size=128).state_dict(), pth)
    with caplog.at_level(logging.INFO):
        nhwc = load_model_file(pth, "cpu")
    nchw = load_model_file(pth, "cpu", channels_last=False)
    assert "mobilefacenet" in caplog.text and "embedded in NHWC (channels_last=auto)" in caplog.text
    first = next(m.weight for m in nhwc.modules() if isinstance(m, torch.nn.Conv2d))
    assert first.is_contiguous(memory_format=torch.channels_last) and not first.is_contiguous()
    assert all(m.weight.is_contiguous() for m in nchw.modules() if isinstance(m, torch.nn.Conv2d))
    x = torch.rand(4, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(nhwc(x), nchw(x), atol=1e-4, rtol=1e-4)

    ckpt = str(tmp_path / "nhwc.ckpt")
    _tiny_checkpoint(ckpt, "model.channels_last=true")
    module = load_model_file(ckpt, "cpu", channels_last=False).module
    assert not module.channels_last and all(p.is_contiguous() for p in module.backbone.parameters())
    assert load_model_file(ckpt, "cpu", channels_last=True).module.channels_last

    with pytest.raises(ValueError, match=r"channels_last='fast': expected true, false or auto"):
        evaluate(compose_eval([f"weights={pth}", f"data.val_root={eval_data / 'bins'}", "channels_last=fast"]),
                 output_dir=str(tmp_path / "bad"))


def test_eval_help_lists_only_the_groups_eval_reads():
    """`elasticface-eval --help` as a user types it: the groups are eval.yaml's defaults, not training's."""
    import yaml

    defaults = yaml.safe_load((ROOT / "configs" / "eval.yaml").read_text())["defaults"]
    eval_groups = {next(iter(d)).split(" ")[-1] for d in defaults if isinstance(d, dict)} - {"hydra"}
    all_groups = {p.name for p in (ROOT / "configs").iterdir() if p.is_dir()}
    out = subprocess.run([sys.executable, "eval.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    groups_section = out.stdout.split("== Configuration groups ==")[1].split("== Keys checked")[0]
    keys_section = out.stdout.split("== Keys checked")[1]
    assert re.search(r"^ijb\.protocol=1v1 +1v1, 1n, both; ", keys_section, re.MULTILINE), "each key's values"
    listed = {line.split(":")[0] for line in groups_section.splitlines()[1:] if ":" in line}
    assert listed == eval_groups, f"--help lists {sorted(listed)}, eval reads {sorted(eval_groups)}"
    assert all_groups - eval_groups - {"local"}, "the tree has training-only groups this test must not see"
    assert "backbone: " in groups_section and "iresnet100" in groups_section
    assert re.search(r"^weights=null +a model file \(\.ckpt", keys_section, re.MULTILINE)  # eval's own, not train's
