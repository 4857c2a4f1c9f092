"""The one embedding loop: the raw-pixel baseline is the verification protocol with `flatten` as the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticface.data.faults import DroppedRecord
from elasticface.data.pairs import TensorPairSet
from elasticface.eval.baselines import pixel_baseline
from elasticface.eval.embedding_loop import embed_dataset
from elasticface.metrics.verification import VerificationAccuracy


class Pairs(TensorPairSet):
    """40 images, 20 pairs, each item (uint8 [3, 8, 8], index)."""

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        base = torch.randint(0, 256, (10, 3, 8, 8), generator=gen)
        noise = torch.randint(-40, 41, (40, 3, 8, 8), generator=gen)
        issame = [i % 2 == 0 for i in range(20)]
        # same pairs share a base face; different pairs do not
        ids = [b for i in range(20) for b in ((i // 2, i // 2) if issame[i] else (i % 10, (i + 3) % 10))]
        super().__init__("toy", (base[ids] + noise).clamp(0, 255).to(torch.uint8), issame)


def test_pixel_baseline_is_the_protocol_on_normalised_pixels():
    pairs = Pairs()
    # the rule written out: pixels scaled to [-1, 1], flattened, one pass, no flip
    metric = VerificationAccuracy(pairs.issame)
    metric.update(((pairs.images.float() / 255 - 0.5) / 0.5).flatten(1), torch.arange(len(pairs)))
    expected = float(metric.compute()["acc"])
    assert pixel_baseline(pairs, batch_size=7) == expected
    assert expected > 0.5  # the same pairs are closer: the set is not degenerate


def test_embed_dataset_keeps_order_and_restores_train_mode():
    pairs = Pairs()
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.5))
    emb, idx = embed_dataset(model, pairs, batch_size=16, flip=True, device="cpu")
    x = (pairs.images.float() / 255 - 0.5) / 0.5
    assert torch.equal(idx, torch.arange(40))
    torch.testing.assert_close(emb, x.flatten(1) + x.flip(-1).flatten(1))  # eval mode: no dropout
    assert model.training


def test_eigenfaces_are_the_protocol_on_an_independent_pca():
    """Eigenfaces: grey faces pooled 2x2, centred on the training mean, projected on the top principal axes
    (numpy's SVD here, not the code's eigendecomposition), scored by the same protocol."""
    from elasticface.eval.baselines import eigenface_baseline, fit_eigenfaces

    pairs = Pairs()
    gen = torch.Generator().manual_seed(1)
    train = [(torch.randint(0, 256, (3, 8, 8), generator=gen).to(torch.uint8), i) for i in range(50)]
    train_x = np.stack([t.numpy().astype(np.float64) for t, _ in train]) / 127.5 - 1.0
    pooled = train_x.mean(1).reshape(50, 4, 2, 4, 2).mean((2, 4)).reshape(50, 16)
    mean = pooled.mean(0)
    _, _, vt = np.linalg.svd(pooled - mean, full_matrices=False)
    k = 6
    x = (pairs.images.numpy().astype(np.float64) / 127.5 - 1.0).mean(1).reshape(40, 4, 2, 4, 2).mean((2, 4))
    projected = (x.reshape(40, 16) - mean) @ vt[:k].T
    metric = VerificationAccuracy(pairs.issame)
    metric.update(torch.from_numpy(projected).float(), torch.arange(len(pairs)))
    expected = float(metric.compute()["acc"])

    model = fit_eigenfaces(train, components=k)
    ours = model(((pairs.images.float() / 127.5) - 1.0)).double().numpy()
    # the same subspace: each axis equal up to its sign
    np.testing.assert_allclose(np.abs(ours), np.abs(projected), atol=1e-4)
    assert eigenface_baseline(train, pairs, components=k) == expected
    # unreadable records (DroppedRecord items) are skipped by the fit, not decoded
    fitted = fit_eigenfaces([*train, DroppedRecord("root", "bad.jpg", "corrupt")], components=k)
    assert fitted.components.shape == (16, k)


def _rank_zero_scores_alone(rank: int, init_file: str, out: str) -> None:
    """Rank 0 scores a baseline while rank 1 has gone on to the next collective, as under `trainer=ddp_cpu`."""
    import datetime
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        torch.save(pixel_baseline(Pairs(), batch_size=7), out)
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_baseline_scored_on_rank_zero_alone_waits_for_no_other_rank(tmp_path):
    """Every pair is embedded by the one process, so the metric must not gather: a gather that rank 1 never joins
    hung DDP runs before their first step (CI, trainer=ddp_cpu debug=tiny)."""
    import torch.multiprocessing as mp
    out = tmp_path / "acc.pt"
    mp.spawn(_rank_zero_scores_alone, args=(str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    assert torch.load(out) == pixel_baseline(Pairs(), batch_size=7)
