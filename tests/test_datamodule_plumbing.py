import pytest
import torch

from elasticface.data.datamodule import FaceDataModule, collate_faces
from elasticface.data.transforms import normalize, random_hflip
from helpers.face_datasets import ListFaces


def test_normalize_maps_uint8_to_minus_one_one():
    x = torch.tensor([0, 127, 255], dtype=torch.uint8).view(1, 3, 1, 1)
    torch.testing.assert_close(normalize(x).flatten(), torch.tensor([-1.0, 127 / 127.5 - 1, 1.0]))
    with pytest.raises(TypeError):
        normalize(x.float())


def test_random_hflip_flips_each_image_independently():
    torch.manual_seed(0)
    x = torch.arange(2 * 3 * 4, dtype=torch.uint8).view(1, 3, 2, 4).repeat(64, 1, 1, 1)
    y = random_hflip(x)
    flipped = (y != x).flatten(1).any(1)
    assert 10 < flipped.sum() < 54  # about half
    assert torch.equal(y[flipped], x[flipped].flip(-1)) and torch.equal(y[~flipped], x[~flipped])


def test_collate_drops_and_counts_corrupt_records():
    data = ListFaces(unreadable={1, 3})
    images, labels, skipped, dropped = collate_faces([data[i] for i in range(5)])
    assert images.shape == (3, 3, 112, 112) and labels.tolist() == [0, 2, 1] and skipped.item() == 2
    assert [(d.source, d.key) for d in dropped] == [("tiny.rec", "1"), ("tiny.rec", "3")]


def test_batch_size_that_does_not_fit_names_the_key():
    dm = FaceDataModule(train_dataset=lambda: ListFaces(5), batch_size=8, num_workers=0)
    with pytest.raises(ValueError, match="data.batch_size=8"):
        dm.setup("fit")


def test_num_classes_mismatch_names_the_key():
    dm = FaceDataModule(train_dataset=lambda: ListFaces(5), batch_size=2, num_workers=0, num_classes=7)
    with pytest.raises(ValueError, match="data.num_classes=7"):
        dm.setup("fit")


def test_train_loader_yields_uint8_batches_with_skip_counts():
    dm = FaceDataModule(train_dataset=lambda: ListFaces(10, unreadable={0}), batch_size=5, num_workers=0)
    dm.setup("fit")
    assert dm.num_classes == 3
    batches = list(dm.train_dataloader())
    assert len(batches) == 2 and sum(int(b[2]) for b in batches) == 1
    assert batches[0][0].dtype == torch.uint8


def test_identity_sampler_gives_k_images_per_identity_through_the_datamodule():
    from functools import partial

    from elasticface.data.sampler import identity_sampler

    dm = FaceDataModule(train_dataset=lambda: ListFaces(48, num_classes=6), batch_size=8, num_workers=0,
                        sampler=partial(identity_sampler, images_per_identity=4, seed=0))
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert batches
    for _, labels, *_ in batches:
        counts = torch.bincount(labels, minlength=6)
        assert labels.numel() == 8 and set(counts[counts > 0].tolist()) == {4}


def test_batch_augment_is_identity_when_off_and_each_extra_does_its_job():
    from elasticface.data.transforms import BatchAugment

    torch.manual_seed(0)
    x = torch.rand(32, 3, 112, 112) * 2 - 1
    assert BatchAugment()(x) is x
    grey = BatchAugment(grayscale_p=1.0)(x.clone())
    assert torch.allclose(grey[:, 0], grey[:, 1]) and torch.allclose(grey[:, 1], grey[:, 2])
    erased = BatchAugment(erasing_p=1.0)(x.clone())
    zero_fraction = (erased == 0).all(1).flatten(1).float().mean(1)
    assert ((zero_fraction >= 0.005) & (zero_fraction <= 0.25)).all()
    jittered = BatchAugment(brightness=0.4, contrast=0.4, saturation=0.4)(x.clone())
    assert jittered.min() >= -1 and jittered.max() <= 1 and not torch.allclose(jittered, x)
    shifted = BatchAugment(shift_px=4)(x.clone())
    assert shifted.shape == x.shape
    # each image is a translate of the original by at most 4 px in each direction
    for i in range(4):
        matches = [(dy, dx) for dy in range(-4, 5) for dx in range(-4, 5)
                   if torch.equal(shifted[i, :, 8:-8, 8:-8], x[i, :, 8 - dy:104 - dy, 8 - dx:104 - dx])]
        assert len(matches) == 1


def test_bad_augment_value_names_the_key():
    from elasticface.data.transforms import BatchAugment

    with pytest.raises(ValueError, match="data.augment.grayscale_p"):
        BatchAugment(grayscale_p=1.5)


def test_augment_applies_to_training_batches_only():
    dm = FaceDataModule(train_dataset=lambda: ListFaces(10), batch_size=5, num_workers=0, hflip=False,
                        augment={"grayscale_p": 1.0})
    images = torch.randint(0, 256, (2, 3, 112, 112), dtype=torch.uint8)

    class T:
        training = True
        global_rank = global_step = 0

    dm.trainer = T()
    out = dm.on_after_batch_transfer((images, torch.tensor([0, 1])), 0)[0]
    assert torch.allclose(out[:, 0], out[:, 2])
    T.training = False
    assert torch.equal(dm.on_after_batch_transfer((images, torch.tensor([0, 1])), 0)[0], normalize(images))


def _load_in_a_sweep_job(num_workers: int) -> list[int]:
    """What a job of `python train.py -m launcher=joblib` does: a DataLoader with workers, inside a loky process."""
    import torch
    from torch.utils.data import DataLoader

    from elasticface.data.datamodule import worker_start_context

    loader = DataLoader(list(range(6)), batch_size=2, num_workers=num_workers,
                        multiprocessing_context=worker_start_context(num_workers))
    return [int(x) for batch in loader for x in torch.as_tensor(batch)]


@pytest.mark.slow  # a joblib sweep as typed
def test_loader_workers_start_inside_a_joblib_sweep_job():
    """loky makes itself the default start method in its workers, and cannot start a DataLoader's workers
    ('Process' object has no attribute 'env'): every launcher=joblib run with data.num_workers > 0 failed."""
    from joblib import Parallel, delayed

    for workers in (1, 0):  # two jobs: joblib runs a single one in this process, not in loky
        jobs = Parallel(n_jobs=2, backend="loky")(delayed(_load_in_a_sweep_job)(workers) for _ in range(2))
        assert jobs == [list(range(6))] * 2
