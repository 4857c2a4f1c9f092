import math

import pytest
import torch
import torch.nn.functional as F

from elasticface.classifier.centers import FullFC, PartialFC


def test_full_fc_gives_clamped_fp32_cosines_even_under_autocast():
    torch.manual_seed(0)
    layer = FullFC(embedding_size=8, num_classes=5)
    emb = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cos, labels = layer(emb.bfloat16(), torch.tensor([0, 1, 2, 3]))
    assert cos.dtype == torch.float32
    expected = F.normalize(emb.bfloat16().float()) @ F.normalize(layer.weight).T
    torch.testing.assert_close(cos, expected, rtol=0, atol=1e-6)
    assert labels.tolist() == [0, 1, 2, 3]


def test_full_fc_exact_centre_and_opposite_are_clamped_to_plus_minus_one():
    layer = FullFC(embedding_size=3, num_classes=2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]]))
    cos, _ = layer(torch.tensor([[1.0, 2.0, 3.0]]) * 7.0)
    assert cos.abs().max() <= 1.0
    assert math.isclose(cos[0, 0].item(), 1.0, abs_tol=1e-6) and math.isclose(cos[0, 1].item(), -1.0, abs_tol=1e-6)


def test_plain_softmax_mode_returns_inner_products():
    layer = FullFC(embedding_size=4, num_classes=3, normalize=False)
    emb = torch.randn(2, 4)
    cos, _ = layer(emb)
    torch.testing.assert_close(cos, emb @ layer.weight.T)


def test_sub_centres_are_laid_out_class_major():
    layer = FullFC(embedding_size=4, num_classes=3, centers_per_class=2)
    assert layer.weight.shape == (6, 4)


@pytest.mark.parametrize("bad", [dict(num_classes=0), dict(centers_per_class=0)])
def test_full_fc_rejects_bad_sizes(bad):
    kwargs = dict(embedding_size=4, num_classes=3) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        FullFC(**kwargs)


def test_partial_fc_keeps_every_positive_and_remaps_labels():
    torch.manual_seed(0)
    layer = PartialFC(embedding_size=8, num_classes=1000, sample_rate=0.05)
    labels = torch.tensor([3, 999, 3, 512, 7])
    emb = torch.randn(5, 8)
    cos, mapped = layer(emb, labels)
    classes = layer.last_sampled_classes
    assert cos.shape == (5, 50) and classes.numel() == 50
    assert torch.equal(classes, classes.sort().values) and classes.unique().numel() == 50
    assert torch.equal(classes[mapped], labels)  # remapped labels point at the right centres
    full = F.normalize(emb) @ F.normalize(layer.weight).T
    torch.testing.assert_close(cos, full[:, classes])


def insightface_sample(labels, num_classes, num_sample, score):
    """insightface's rule (recognition/arcface_torch/partial_fc_v2.py, `sample`), given the uniform scores."""
    positive = torch.unique(labels[labels >= 0], sorted=True)
    if num_sample - positive.size(0) >= 0:
        perm = score.clone()
        perm[positive] = 2.0
        index = torch.topk(perm, k=num_sample)[1]
        return index.sort()[0]
    return positive


@pytest.mark.parametrize("labels", [[3, 999, 3, 512, 7], [-1, 4, -1, 4], [-1, -1], list(range(50))])
def test_partial_fc_samples_as_insightface_with_a_size_fixed_in_advance(labels):
    """The same classes as insightface's rule from the same scores, without reading the labels back."""
    layer = PartialFC(embedding_size=4, num_classes=1000, sample_rate=0.05)
    labels = torch.tensor(labels)
    torch.manual_seed(1)
    ours = layer.sample_classes(labels)
    torch.manual_seed(1)
    score = torch.rand(1001)[:1000]
    torch.testing.assert_close(ours, insightface_sample(labels, 1000, 50, score))


def test_partial_fc_with_more_positives_than_its_sample_keeps_them_all_and_fills_to_the_batch():
    layer = PartialFC(embedding_size=4, num_classes=100, sample_rate=0.05)  # 5 sampled classes
    labels = torch.tensor([7, 7, 9, 11, 13, 17, 19, 23, -1])
    classes = layer.sample_classes(labels)
    assert classes.numel() == labels.numel() and torch.equal(classes, classes.sort().values)
    assert set(labels[labels >= 0].tolist()) <= set(classes.tolist())  # insightface: exactly these 7 classes


def test_partial_fc_with_sub_centres_selects_all_k_rows_of_each_class():
    torch.manual_seed(0)
    layer = PartialFC(embedding_size=4, num_classes=100, sample_rate=0.1, centers_per_class=3)
    emb, labels = torch.randn(2, 4), torch.tensor([5, 42])
    cos, mapped = layer(emb, labels)
    classes = layer.last_sampled_classes
    full = F.normalize(emb) @ F.normalize(layer.weight).T
    rows = (classes[:, None] * 3 + torch.arange(3)).reshape(-1)
    torch.testing.assert_close(cos, full[:, rows])
    assert torch.equal(classes[mapped], labels)


def test_partial_fc_is_full_fc_in_eval_and_keeps_minus_one_labels():
    layer = PartialFC(embedding_size=4, num_classes=100, sample_rate=0.1)
    layer.eval()
    cos, _ = layer(torch.randn(2, 4), torch.tensor([1, 2]))
    assert cos.shape == (2, 100)
    layer.train()
    _, mapped = layer(torch.randn(2, 4), torch.tensor([-1, 2]))
    assert mapped[0] == -1


def test_partial_fc_gradient_reaches_only_sampled_centres():
    torch.manual_seed(0)
    layer = PartialFC(embedding_size=4, num_classes=50, sample_rate=0.2)
    cos, mapped = layer(torch.randn(3, 4), torch.tensor([0, 1, 2]))
    F.cross_entropy(30 * cos, mapped).backward()
    touched = layer.weight.grad.abs().sum(1) > 0
    assert set(touched.nonzero().flatten().tolist()) <= set(layer.last_sampled_classes.tolist())


def test_partial_fc_rejects_bad_rate():
    with pytest.raises(ValueError, match="sample_rate"):
        PartialFC(embedding_size=4, num_classes=10, sample_rate=0.0)
