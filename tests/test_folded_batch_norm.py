"""CPU embedding at ONNX Runtime's pace: BatchNorms folded into the convolutions before them, a few faces at a time,
the embeddings unchanged but for float32 rounding (the oracle: the unfolded model, whole batch)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from conftest import ROOT
from elasticface.backbones.from_weights import backbone_from_weights
from elasticface.backbones.iresnet import iresnet_tiny
from elasticface.eval.embed import load_model_file
from elasticface.eval.embedding_loop import embed_dataset
from elasticface.eval.folded_batch_norm import fold_batch_norms, for_cpu_inference
from elasticface.metrics.verification import CPU_MICRO_BATCH, flip_fused_embeddings

Y1 = ROOT / "tests" / "data" / "mxnet" / "y1" / "model-0000.params"


def _batch_norms(model):
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _trained_statistics(model, seed=0):
    """BatchNorms with the statistics and affine weights a trained model has, not the identity a new one starts as."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.2)
            if m.affine:
                m.weight.data.copy_(torch.randn(n, generator=g) * 0.5 + 1)
                m.bias.data.copy_(torch.randn(n, generator=g) * 0.2)
    return model.eval()


def test_folding_keeps_iresnets_embeddings_and_leaves_the_model_as_it_was():
    model = _trained_statistics(iresnet_tiny())
    faces = torch.rand(6, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        expected = model(faces)
        folded = fold_batch_norms(model)
        got = folded(faces)
    assert _batch_norms(folded) < _batch_norms(model)  # conv -> BN pairs fused (iresnet's BN -> conv ones stay)
    assert _batch_norms(model) == sum(1 for m in iresnet_tiny().modules() if isinstance(m, nn.BatchNorm2d)) + \
        sum(1 for m in iresnet_tiny().modules() if isinstance(m, nn.BatchNorm1d))  # the given model is untouched
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())


def test_y1_loads_folded_and_embeds_as_the_released_model():
    """eval's loader on the CPU folds every one of y1's BatchNorms that follows a convolution; the protocol's
    embeddings (flip fused, a few faces at a time) equal the unfolded model's on the whole batch."""
    plain, _ = backbone_from_weights(str(Y1), say=lambda *_: None)
    plain.eval()
    model = load_model_file(str(Y1), "cpu")
    assert _batch_norms(plain) > 40 and _batch_norms(model) <= 1
    faces = torch.rand(CPU_MICRO_BATCH * 2 + 3, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        expected = flip_fused_embeddings(plain, faces)
        got = flip_fused_embeddings(model, faces, micro_batch=CPU_MICRO_BATCH)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() < 1e-4 * expected.abs().max().item()


def test_a_backbone_fx_cannot_trace_runs_unfolded_and_says_so(caplog):
    class Branching(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
                return self.bn(self.conv(x))
            return self.bn(self.conv(-x))

    model = _trained_statistics(Branching())
    caplog.set_level(logging.INFO)
    assert fold_batch_norms(model, "branching") is model
    assert any("branching: BatchNorm not folded for CPU inference (torch.fx cannot trace it" in r.getMessage()
               for r in caplog.records)


def test_gpu_models_are_left_as_they_are():
    model = _trained_statistics(iresnet_tiny())
    assert for_cpu_inference(model, torch.device("cuda")) is model
    assert for_cpu_inference(model, torch.device("cpu")) is not model


def test_the_cpu_embeds_a_few_faces_at_a_time_and_the_result_is_the_whole_batchs():
    """embed_dataset on the CPU calls the model with at most CPU_MICRO_BATCH faces, whatever the loader's batch."""
    seen = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3 * 8 * 8, 5)

        def forward(self, x):
            seen.append(len(x))
            return self.proj(nn.functional.adaptive_avg_pool2d(x, 8).flatten(1))

    images = torch.randint(0, 256, (40, 3, 16, 16), dtype=torch.uint8)
    dataset = [(images[i], i) for i in range(40)]
    spy = Spy().eval()
    emb, idx = embed_dataset(spy, dataset, batch_size=37, flip=True, device="cpu")
    assert max(seen) == CPU_MICRO_BATCH and sum(seen) == 80 and idx.tolist() == list(range(40))
    whole = flip_fused_embeddings(spy, (images.float() / 255 - 0.5) / 0.5)
    torch.testing.assert_close(emb, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("micro", [1, 7, 16])
def test_micro_batches_change_nothing_in_eval_mode(micro):
    model = _trained_statistics(iresnet_tiny(), seed=3)
    faces = torch.rand(19, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        got, whole = flip_fused_embeddings(model, faces, micro_batch=micro), flip_fused_embeddings(model, faces)
    assert got.shape == whole.shape  # convolution kernels picked by batch size round differently: float32's error
    assert (got - whole).abs().max().item() < 1e-5 * whole.abs().max().item()
