"""Batched embedding with flip fusion, and the folder -> .npy CLI."""

from __future__ import annotations

import os

import numpy as np
import torch
from PIL import Image

from elasticface.data.pairs import TensorPairSet
from elasticface.data.transforms import normalize
from elasticface.cli.embed import main
from elasticface.eval.embedding_loop import embed_dataset, evaluate_pair_set
from elasticface.export import export_torchscript
from elasticface.metrics.verification import evaluate_verification, flip_fused_embeddings
from helpers.face_pairs import noisy_pairs
from helpers.pool_embedder import PoolEmbedder  # noqa: E402


def _faces(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, 112, 112), dtype=torch.uint8, generator=g)


def test_embed_dataset_flip_fusion_and_order():
    model = PoolEmbedder()
    images = _faces(10)
    pairs = TensorPairSet("toy", images, [True, False] * 2 + [True])
    model.train()
    emb, idx = embed_dataset(model, pairs, batch_size=4, flip=True, device="cpu")
    assert model.training  # restored
    assert idx.tolist() == list(range(10))
    x = (images.float() / 255 - 0.5) / 0.5
    with torch.no_grad():
        want = model.eval()(x) + model(x.flip(-1))
        # the same function as training validation, to the bit when called on the same batches (4, 4, 2): the
        # matrix kernels for a batch of 10 may differ in the last bits (seen with 1 thread per xdist worker)
        batches = [flip_fused_embeddings(model, normalize(images[i:i + 4])) for i in range(0, 10, 4)]
        assert torch.equal(emb, torch.cat(batches))
        # one pass over [x, flip(x)] is the same sum, to float tolerance (other shapes, other kernels)
        both = model(torch.cat([x, x.flip(-1)]))
    torch.testing.assert_close(emb, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(emb, both[:10] + both[10:], rtol=1e-5, atol=1e-5)
    emb_noflip, _ = embed_dataset(model, pairs, batch_size=3, flip=False, device="cpu")
    torch.testing.assert_close(emb_noflip, model(x).detach(), rtol=1e-5, atol=1e-5)


def _toy_pairs(num_pairs=20, seed=1):
    images, issame = noisy_pairs(num_pairs, seed)
    return TensorPairSet("toy", torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), issame)


def test_evaluate_pair_set_equals_functional_protocol():
    model = PoolEmbedder()
    pairs = _toy_pairs()
    result, curves = evaluate_pair_set(model, pairs, batch_size=7, device="cpu")
    emb, _ = embed_dataset(model, pairs, batch_size=40, device="cpu")
    ref = evaluate_verification(emb[0::2], emb[1::2], pairs.issame)
    assert result["acc"] == ref["acc"] and result["acc"] >= 0.9
    assert set(curves) >= {"fpr", "tpr", "genuine", "impostor"}


def _write_folder(root, n=5, size=112):
    os.makedirs(os.path.join(root, "a"))
    os.makedirs(os.path.join(root, "b"))
    rng = np.random.default_rng(0)
    for i in range(n):
        sub = "a" if i % 2 else "b"
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(os.path.join(root, sub, f"{i}.png"))


def test_embed_folder_cli(tmp_path):
    images = tmp_path / "faces"
    _write_folder(str(images))
    model = PoolEmbedder().eval()
    ts = str(tmp_path / "m.pt")
    export_torchscript(model, ts)
    out = str(tmp_path / "out" / "emb.npy")
    assert main(["--model", ts, "--images", str(images), "--out", out, "--batch-size", "2", "--device", "cpu",
                 "--allow-torchscript"]) == 0
    emb = np.load(out)
    paths = open(str(tmp_path / "out" / "emb.txt")).read().split()
    assert emb.shape == (5, 64) and len(paths) == 5 and paths == sorted(paths) and paths[0].startswith("a/")
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    # row i is the (flip-fused, normalised) embedding of paths[i]
    img = torch.from_numpy(np.array(Image.open(images / paths[3]))).permute(2, 0, 1)[None]
    with torch.no_grad():
        x = (img.float() / 255 - 0.5) / 0.5
        want = torch.nn.functional.normalize(model(x) + model(x.flip(-1)), dim=1)[0].numpy()
    np.testing.assert_allclose(emb[3], want, atol=1e-5)
    # Hydra-style arguments, no flip, raw embeddings
    out2 = str(tmp_path / "emb2.npy")
    hydra_args = [f"weights={ts}", f"images={images}", f"out={out2}", "flip=false", "normalize=false", "device=cpu",
                  "allow_torchscript=true"]
    assert main(hydra_args) == 0
    with torch.no_grad():
        raw = model(x)[0].numpy()
    np.testing.assert_allclose(np.load(out2)[3], raw, atol=1e-5)


def test_embed_folder_rejects_unaligned_sizes(tmp_path, capsys):
    images = tmp_path / "faces"
    _write_folder(str(images), n=2, size=100)
    ts = str(tmp_path / "m.pt")
    export_torchscript(PoolEmbedder().eval(), ts)
    assert main(["--model", ts, "--images", str(images), "--out", str(tmp_path / "e.npy"), "--device", "cpu",
                 "--allow-torchscript"]) == 2  # a user's mistake: one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("elasticface-embed: error: ") and "expected aligned 112x112" in err[0]
    assert main(["--model", ts, "--images", str(images), "--out", str(tmp_path / "e.npy"), "--device", "cpu",
                 "--resize", "--allow-torchscript"]) == 0
