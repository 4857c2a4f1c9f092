"""The FaceDataset protocol: every training set the configs name satisfies it, and the data module refuses one
that lacks a member, naming the class and the member, and counts what a dataset dropped while it was built."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT

from elasticface.data.datamodule import FaceDataModule
from elasticface.data.face_dataset import FaceDataset, face_dataset_members
from elasticface.data.faults import DroppedRecord, TooManyCorruptRecords
from elasticface.data.folder import ImageFolderFaces
from elasticface.data.recordio_dataset import RecordIODataset
from elasticface.data.synthetic import SyntheticFaces
from helpers.face_datasets import ListFaces
from helpers.images import save_image, smooth_image, smooth_jpeg
from helpers.recordio_files import ifqq, whole, write_files

# what the data module reads of a training set, written out here independently of the protocol's class body
MEMBERS = {"num_classes", "labels", "max_corrupt", "dropped_at_scan", "__len__", "__getitem__"}


def recordio_with_a_stray_label(root) -> None:
    """im2rec layout, 4 classes: keys 0..7 labelled k % 4, key 8 labelled 99 (dropped while the index is scanned)."""
    jpeg = smooth_jpeg(0)
    write_files(root, [(k, whole(ifqq(0, float(99 if k == 8 else k % 4), k) + jpeg)) for k in range(9)],
                "4,112,112\n")


def image_folder(root) -> None:
    for label in range(3):
        (root / f"id{label}").mkdir(parents=True)
        for i in range(2):
            (root / f"id{label}" / f"{i}.jpg").write_bytes(smooth_jpeg(10 * label + i))


@pytest.fixture(params=["recordio", "folder", "synthetic"])
def config_dataset(request, tmp_path):
    """Each training set a `configs/data` option builds, and what it must report (classes, size, scan drops)."""
    if request.param == "recordio":
        recordio_with_a_stray_label(tmp_path)
        return RecordIODataset(str(tmp_path), max_corrupt=3), (4, 8, [(f"{tmp_path}/train.rec", "8")])
    if request.param == "folder":
        image_folder(tmp_path)
        return ImageFolderFaces(str(tmp_path)), (3, 6, [])
    return SyntheticFaces(num_identities=2, images_per_identity=3, cache=False), (2, 6, [])


def test_the_protocol_declares_what_the_data_module_reads():
    assert set(face_dataset_members()) == MEMBERS


def test_every_config_dataset_is_a_face_dataset_and_trains_through_the_data_module(config_dataset):
    dataset, (classes, size, scan_drops) = config_dataset
    assert isinstance(dataset, FaceDataset)
    assert [(d.source, d.key) for d in dataset.dropped_at_scan] == scan_drops
    dm = FaceDataModule(train_dataset=lambda: dataset, batch_size=2, num_workers=0)
    dm.setup("fit")
    assert dm.num_classes == classes and len(dataset) == size and dataset.labels.tolist() == [
        int(dataset[i][1]) for i in range(size)]
    assert sorted(dm.faults.records) == scan_drops  # counted once, toward the same limit as records read later
    assert dm.faults.max_corrupt == dataset.max_corrupt
    images, labels, skipped, dropped = next(iter(dm.train_dataloader()))
    assert images.shape == (2, 3, 112, 112) and labels.max() < classes and int(skipped) == 0 and dropped == []


def without(member: str) -> type:
    """A class with every FaceDataset member but `member`: ListFaces' own, with that one taken out."""

    def init(self) -> None:
        ListFaces.__init__(self)
        self.__dict__.pop(member, None)

    methods = {name: vars(ListFaces)[name] for name in ("__len__", "__getitem__") if name != member}
    return type(f"FacesWithout_{member.strip('_')}", (), {**methods, "__init__": init})


@pytest.mark.parametrize("member", sorted(MEMBERS))
def test_a_dataset_lacking_a_member_is_refused_naming_the_class_and_the_member(member):
    incomplete = without(member)
    dataset = incomplete()
    assert not isinstance(dataset, FaceDataset)
    dm = FaceDataModule(train_dataset=incomplete, batch_size=2, num_workers=0)
    with pytest.raises(TypeError, match=rf"{incomplete.__qualname__} cannot be a training set: it lacks {member} "):
        dm.setup("fit")


def test_records_dropped_while_building_count_toward_max_corrupt():
    drops = [DroppedRecord("big.rec", str(k), "bad header") for k in (4, 9, 4)]  # key 4 twice: counted once
    dm = FaceDataModule(train_dataset=lambda: ListFaces(dropped_at_scan=drops, max_corrupt=2), batch_size=2,
                        num_workers=0)
    dm.setup("fit")
    assert dm.faults.num_corrupt == 2
    dm = FaceDataModule(train_dataset=lambda: ListFaces(dropped_at_scan=drops, max_corrupt=1), batch_size=2,
                        num_workers=0)
    with pytest.raises(TooManyCorruptRecords, match=r"2 distinct corrupt records.*max_corrupt=1.*big\.rec: keys 4, 9"):
        dm.setup("fit")


def test_identity_sampler_reads_the_labels_of_a_face_dataset():
    from elasticface.data.sampler import IdentityBatchSampler

    labels = np.arange(12) % 3
    from_dataset = list(IdentityBatchSampler(ListFaces(12, labels=labels.tolist()), 6, 2, num_replicas=1, rank=0))
    assert from_dataset == list(IdentityBatchSampler(labels, 6, 2, num_replicas=1, rank=0))


def test_dali_decoder_refuses_a_training_set_that_is_not_recordio():
    dm = FaceDataModule(train_dataset=lambda: ListFaces(10), batch_size=2, num_workers=0, decoder="dali")
    dm.setup("fit")
    with pytest.raises(ValueError, match="data.decoder=dali reads insightface RecordIO.*ListFaces"):
        dm.train_dataloader()


def docs_example(name: str) -> type:
    """A class from the ```python block of docs/data.md's "Your own training set", run as a user pastes it."""
    text = (ROOT / "docs" / "data.md").read_text()
    section = text[text.index("## Your own training set"):]
    start = section.index("```python\n") + len("```python\n")
    namespace: dict = {}
    exec(compile(section[start:section.index("```\n", start)], "docs/data.md", "exec"), namespace)
    return namespace[name]


def test_the_docs_own_dataset_trains_and_skips_an_unreadable_file(tmp_path):
    csv_faces = docs_example("CsvFaces")
    lines = []
    for i in range(4):
        save_image(tmp_path / f"{i}.jpg", smooth_image(i))
        lines.append(f"{tmp_path / f'{i}.jpg'},{i // 2}")
    gone = tmp_path / "gone.jpg"
    (tmp_path / "faces.csv").write_text("\n".join([*lines, f"{gone},1"]) + "\n")
    dataset = csv_faces(str(tmp_path / "faces.csv"))
    assert isinstance(dataset, FaceDataset)
    dm = FaceDataModule(train_dataset=lambda: dataset, batch_size=5, num_workers=0)
    dm.setup("fit")
    assert dm.num_classes == 2
    ((images, labels, skipped, dropped),) = list(dm.train_dataloader())
    dm.faults.add(dropped)
    assert images.shape == (4, 3, 112, 112) and sorted(labels.tolist()) == [0, 0, 1, 1] and int(skipped) == 1
    assert list(dm.faults.records) == [(str(gone), "4")]
