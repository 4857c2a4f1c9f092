"""Image-folder faces and the shared decoder (grey -> RGB, resize counting, fallbacks)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from elasticface.data.decode import CorruptImageError, DecodeStats, decode_image
from elasticface.data.faults import DroppedRecord, FaultLedger, TooManyCorruptRecords
from elasticface.data.folder import ImageFiles, ImageFolderFaces, folder_val_sets, list_images
from helpers.images import rgb_of, save_image, smooth_image


@pytest.fixture
def faces(tmp_path):
    root = tmp_path / "faces"
    save_image(root / "bob" / "1.jpg", smooth_image(1))
    save_image(root / "bob" / "2.png", smooth_image(2), "PNG")
    save_image(root / "alice" / "a.jpg", smooth_image(3, grey=True))       # grey
    save_image(root / "carol" / "c.jpg", smooth_image(4, size=(120, 100)))  # not 112x112
    (root / "carol" / "notes.txt").write_text("ignored")
    return root


def test_labels_follow_sorted_folder_names(faces):
    ds = ImageFolderFaces(str(faces))
    assert ds.classes == ["alice", "bob", "carol"] and ds.num_classes == 3
    assert ds.labels.dtype == np.int64 and ds.labels.tolist() == [0, 1, 1, 2]
    items = [ds[i] for i in range(len(ds))]
    for img, _ in items:
        assert img.dtype == torch.uint8 and img.shape == (3, 112, 112)
    assert [y for _, y in items] == [0, 1, 1, 2]
    grey = items[0][0]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])
    assert np.array_equal(items[2][0].permute(1, 2, 0).numpy(), smooth_image(2))  # PNG is lossless
    assert ds.stats.resized == 1 and ds.stats.grey >= 1


def test_num_classes_check(faces):
    with pytest.raises(ValueError, match="num_classes=4.*3 identity folders"):
        ImageFolderFaces(str(faces), num_classes=4)


def test_empty_and_missing_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.*one sub-folder of images per identity"):
        ImageFolderFaces(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no identity sub-folders"):
        ImageFolderFaces(str(tmp_path / "empty"))
    (tmp_path / "empty" / "someone").mkdir()
    with pytest.raises(ValueError, match="no images"):
        ImageFolderFaces(str(tmp_path / "empty"))


def test_corrupt_image_skipped_then_limit(faces):
    (faces / "bob" / "3.jpg").write_bytes(b"\xff\xd8\xff garbage")
    (faces / "bob" / "4.jpg").write_bytes(b"")
    ds = ImageFolderFaces(str(faces), max_corrupt=1)
    idx = [i for i, p in enumerate(ds.paths) if p.endswith(("3.jpg", "4.jpg"))]
    ledger = FaultLedger(ds.max_corrupt)
    ledger.add([ds[idx[0]], ds[idx[0]]])
    assert isinstance(ds[idx[0]], DroppedRecord) and ds.num_corrupt == 1 and ledger.num_corrupt == 1
    keys = r"faces: keys bob/3\.jpg, bob/4\.jpg"
    with pytest.raises(TooManyCorruptRecords, match=rf"{keys}.*max_corrupt|max_corrupt=1.*{keys}"):
        ledger.add([ds[idx[1]]])


def test_decoders(faces):
    data = (faces / "bob" / "1.jpg").read_bytes()
    ref = rgb_of(data).transpose(2, 0, 1)
    assert np.array_equal(decode_image(data, "pil").numpy(), ref)
    assert np.abs(decode_image(data, "torchvision").numpy().astype(int) - ref).max() <= 3
    stats = DecodeStats()
    png = (faces / "bob" / "2.png").read_bytes()
    assert decode_image(png, "torchvision", stats=stats).shape == (3, 112, 112) and stats.fallback == 1
    assert decode_image(data, "torchvision", image_size=None).shape == (3, 112, 112)
    with pytest.raises(CorruptImageError):
        decode_image(data[: len(data) // 3], "torchvision")
    with pytest.raises(ValueError, match="unknown decoder"):
        decode_image(data, "opencv")


def test_folder_val_sets(faces, tmp_path):
    assert folder_val_sets(None) == {}
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("# comment\nbob/1.jpg bob/2.png 1\nbob/1.jpg alice/a.jpg 0\n")
    sets = folder_val_sets(str(pairs), str(faces), name="mine")
    ps = sets["mine"]
    assert ps.num_pairs == 2 and ps.issame.tolist() == [True, False] and len(ps) == 4
    img, i = ps[3]
    assert i == 3 and img.shape == (3, 112, 112)


def test_image_files_see_the_files_training_sees(faces):
    """One list of image extensions: what `eval.embed` embeds is what a folder dataset trains on."""
    save_image(faces / "bob" / "3.tif", smooth_image(5), "TIFF")
    paths = list_images(str(faces))
    assert paths == sorted(os.path.relpath(p, faces) for p in ImageFolderFaces(str(faces)).paths)
    assert "bob/3.tif" in paths and "carol/notes.txt" not in paths
    aligned = ImageFiles(str(faces), [p for p in paths if not p.startswith("carol")])
    for i in range(len(aligned)):
        img, index = aligned[i]
        assert index == i and img.dtype == torch.uint8 and img.shape == (3, 112, 112)
    grey = aligned[paths.index("alice/a.jpg")][0]
    assert torch.equal(grey[0], grey[1])  # grey became RGB
    with pytest.raises(ValueError, match=r"carol/c.jpg: image is 100x120; expected aligned 112x112"):
        ImageFiles(str(faces), ["carol/c.jpg"])[0]
    assert ImageFiles(str(faces), ["carol/c.jpg"], resize=True)[0][0].shape == (3, 112, 112)
    (faces / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(CorruptImageError, match="broken.jpg"):
        ImageFiles(str(faces), ["broken.jpg"])[0]


def test_pairs_of_people_the_training_folder_holds_are_refused_before_the_first_step(faces, tmp_path):
    """Verification is on people never trained on: a pairs list naming a training person stops the run at setup,
    naming the list and the person; the same list against other people passes."""
    from elasticface.data.datamodule import FaceDataModule

    held_out = tmp_path / "held_out"
    save_image(held_out / "dave" / "1.jpg", smooth_image(5))
    save_image(held_out / "dave" / "2.jpg", smooth_image(6))
    save_image(held_out / "bob" / "9.jpg", smooth_image(7))
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("dave/1.jpg dave/2.jpg 1\ndave/1.jpg bob/9.jpg 0\n")

    def datamodule(pairs_file):
        return FaceDataModule(lambda: ImageFolderFaces(str(faces)),
                              lambda: folder_val_sets(str(pairs_file), str(held_out)), batch_size=2, num_workers=0)

    with pytest.raises(ValueError, match=r"pairs.txt: names 1 people the training folder holds too \(bob\)"):
        datamodule(pairs).setup("fit")
    save_image(held_out / "erin" / "1.jpg", smooth_image(8))
    pairs.write_text("dave/1.jpg dave/2.jpg 1\ndave/2.jpg erin/1.jpg 0\n" * 5)
    datamodule(pairs).setup("fit")


def test_a_pair_set_too_small_for_ten_folds_is_refused_when_read(faces, tmp_path):
    """The 10-fold protocol picks each fold's threshold on the other nine folds' matched and mismatched pairs: a
    set of fewer than 10 pairs, or of one kind only, is refused in one line at setup, before the first step (it
    used to end in kfold_bounds' traceback after the start baseline's model load)."""
    from elasticface.data.datamodule import FaceDataModule
    from elasticface.utils.errors import BadValue

    held_out = tmp_path / "held_out"
    for person, seed in (("dave", 5), ("erin", 6)):
        save_image(held_out / person / "1.jpg", smooth_image(seed))
        save_image(held_out / person / "2.jpg", smooth_image(seed + 10))
    pairs = tmp_path / "pairs.txt"

    def setup(lines):
        pairs.write_text("".join(lines))
        FaceDataModule(lambda: ImageFolderFaces(str(faces)),
                       lambda: folder_val_sets(str(pairs), str(held_out)), batch_size=2, num_workers=0).setup("fit")

    matched, mismatched = "dave/1.jpg dave/2.jpg 1\n", "dave/1.jpg erin/2.jpg 0\n"
    with pytest.raises(BadValue, match=r"pairs.txt: pair set '.*' holds 9 pairs \(5 matched, 4 mismatched\); "
                                        r"the 10-fold protocol needs at least 10 pairs"):
        setup([matched] * 5 + [mismatched] * 4)
    with pytest.raises(BadValue, match=r"holds 10 pairs \(10 matched, 0 mismatched\)"):
        setup([matched] * 10)
    with pytest.raises(BadValue, match=r"holds 12 pairs \(0 matched, 12 mismatched\)"):
        setup([mismatched] * 12)
    setup([matched, mismatched] * 5)


def test_roots_of_the_same_people_train_as_one_set(faces, tmp_path):
    """`data.train_dataset.root=[a, b]`: each person one class, their images from a then from b (sharp photos and
    their low-resolution twins); roots of other people are refused naming the people, an unreadable image names
    its own root."""
    from elasticface.data.low_resolution import degrade_folder

    degrade_folder(faces, tmp_path / "lowres", sizes=(16, 16))
    ds = ImageFolderFaces([str(tmp_path / "lowres"), str(faces)])
    assert ds.classes == ["alice", "bob", "carol"] and ds.num_classes == 3
    rel = [os.path.relpath(p, tmp_path) for p in ds.paths]
    assert rel == ["lowres/alice/a.jpg", "faces/alice/a.jpg", "lowres/bob/1.jpg", "lowres/bob/2.png",
                   "faces/bob/1.jpg", "faces/bob/2.png", "lowres/carol/c.jpg", "faces/carol/c.jpg"]
    assert ds.labels.tolist() == [0, 0, 1, 1, 1, 1, 2, 2]
    assert [ds[i][1] for i in range(len(ds))] == ds.labels.tolist()
    sharp, blurred = ds[5][0].float(), ds[3][0].float()  # bob/2.png, lossless both ways
    assert np.array_equal(sharp.permute(1, 2, 0).numpy(), smooth_image(2))
    assert (blurred - sharp).abs().mean() > 1  # 16 px and back is not the photo
    assert repr(ds).startswith(f"ImageFolderFaces(root='{tmp_path / 'lowres'} + {faces}'")

    save_image(tmp_path / "others" / "alice" / "x.jpg", smooth_image(8))
    save_image(tmp_path / "others" / "dave" / "x.jpg", smooth_image(9))
    with pytest.raises(ValueError, match=r"faces and .*others must hold the same people.*3 are in only one of "
                                         r"them \(bob, carol, dave\)"):
        ImageFolderFaces([str(faces), str(tmp_path / "others")])
    with pytest.raises(ValueError, match=r"data.train_dataset.root=\[\]"):
        ImageFolderFaces([])
    (faces / "bob" / "1.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    dropped = ds[4]
    assert isinstance(dropped, DroppedRecord) and dropped.source == str(faces) and dropped.key == "bob/1.jpg"


def test_the_typed_list_of_roots_reaches_the_training_set(faces, tmp_path):
    """What the docs type: the CFP experiment's low-resolution split plus the same people's sharp folder."""
    from hydra.utils import instantiate

    from elasticface.cli.compose import compose_train
    from elasticface.data.convert import pairs_to_bin
    from elasticface.data.low_resolution import degrade_folder

    degrade_folder(faces, tmp_path / "lowres" / "train")
    held_out = tmp_path / "held_out"
    for i in range(4):
        save_image(held_out / "dave" / f"{i}.jpg", smooth_image(10 + i))
        save_image(held_out / "erin" / f"{i}.jpg", smooth_image(20 + i))
    (tmp_path / "pairs.txt").write_text("dave/0.jpg dave/1.jpg 1\ndave/2.jpg erin/3.jpg 0\n" * 5)
    for name in ("cfp_fp_splits6_10", "cfp_ff_splits6_10", "lfw"):
        pairs_to_bin(str(tmp_path / "pairs.txt"), str(held_out), str(tmp_path / "lowres" / f"{name}.bin"))
    cfg = compose_train(["experiment=cfp_finetune", f"data.root={tmp_path / 'lowres'}",
                         f"data.train_dataset.root=[{tmp_path / 'lowres' / 'train'},{faces}]", "data.batch_size=4"],
                        tmp_path)
    data = instantiate(cfg.data)
    data.setup("fit")
    assert data.train_set.roots == [str(tmp_path / "lowres" / "train"), str(faces)]
    assert data.num_classes == 3 and len(data.train_set) == 8
    assert sorted(data.val_sets) == ["cfp_ff_splits6_10", "cfp_fp_splits6_10", "lfw"]
