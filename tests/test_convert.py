"""Converters: image folder <-> RecordIO (legacy insightface layout), pair list -> .bin, CLI."""

from __future__ import annotations

import io
import os
import shutil

import pytest
import torch
from PIL import Image

from elasticface.cli.convert import main
from elasticface.data.convert import pairs_to_bin, recordio_to_folder, write_recordio
from elasticface.data.folder import ImageFolderFaces
from elasticface.data.pair_files import load_bin
from helpers.images import smooth_jpeg
from helpers.recordio_files import MAGIC_B
from elasticface.data.recordio import read_record, unpack_header
from elasticface.data.recordio_dataset import RecordIODataset

@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "faces"
    files = {}
    for ident, n in (("id_a", 3), ("id_b", 1), ("id_c", 2)):
        (root / ident).mkdir(parents=True)
        for j in range(n):
            data = smooth_jpeg(10 * ord(ident[-1]) + j)
            if ident == "id_b":  # a valid JPEG carrying the RecordIO magic at an aligned payload offset
                pad = (-(24 + len(data))) % 4
                data = data + b"\0" * pad + MAGIC_B + b"end!"
            (root / ident / f"{j}.jpg").write_bytes(data)
            files[(ident, j)] = data
    (root / "id_c" / "big.jpg").write_bytes(smooth_jpeg(7, size=(150, 130)))
    (root / "id_c" / "grey.jpg").write_bytes(smooth_jpeg(8, grey=True))
    return root, files


def test_folder_to_recordio_legacy_layout(folder, tmp_path):
    root, files = folder
    out = tmp_path / "rec"
    stats = write_recordio(str(root), str(out))
    assert stats["images"] == 8 and stats["classes"] == 3 and stats["reencoded"] == 1 and stats["multi_chunk"] == 1
    assert (out / "property").read_text().strip() == "3,112,112"
    # the header record, read straight from the bytes: flag 2, labels [N+1, N+1+C], no image
    with open(out / "train.rec", "rb") as f:
        head, rest = unpack_header(read_record(f, 0))
    assert head.flag == 2 and head.label.tolist() == [9.0, 12.0] and rest == b""
    keys = [int(line.split()[0]) for line in (out / "train.idx").read_text().splitlines()]
    assert keys == list(range(12))
    ds = RecordIODataset(str(out))
    folder_ds = ImageFolderFaces(str(root))
    assert ds.layout == "legacy" and ds.num_classes == 3 and ds.labels.tolist() == folder_ds.labels.tolist()
    for i, path in enumerate(folder_ds.paths):
        raw, label = ds.read_raw(i)
        original = open(path, "rb").read()
        if not path.endswith("big.jpg"):
            assert raw == original  # 112x112 JPEGs are stored byte for byte
        img, lab = ds[i]
        assert lab == label == folder_ds.labels[i]
        assert (img.int() - folder_ds[i][0].int()).abs().max() <= (40 if path.endswith("big.jpg") else 0)


def test_recordio_to_folder_round_trip(folder, tmp_path):
    root, _ = folder
    write_recordio(str(root), str(tmp_path / "rec"))
    stats = recordio_to_folder(str(tmp_path / "rec"), str(tmp_path / "back"))
    assert stats == {"images": 8, "classes": 3, "skipped": 0}
    back = ImageFolderFaces(str(tmp_path / "back"))
    ds = RecordIODataset(str(tmp_path / "rec"))
    assert back.classes == ["0", "1", "2"] and back.labels.tolist() == ds.labels.tolist()
    by_key = {int(os.path.splitext(os.path.basename(p))[0]): p for p in back.paths}
    for i, key in enumerate(ds.image_keys.tolist()):
        assert open(by_key[key], "rb").read() == ds.read_raw(i)[0]


def test_pairs_to_bin(folder, tmp_path):
    root, files = folder
    lst = tmp_path / "pairs.txt"
    lst.write_text("id_a/0.jpg id_a/1.jpg 1\nid_a/2.jpg id_c/big.jpg 0\n")
    stats = pairs_to_bin(str(lst), str(root), str(tmp_path / "mine.bin"))
    assert stats == {"pairs": 2, "positives": 1, "skipped_pairs": 0}
    ps = load_bin(str(tmp_path / "mine.bin"))
    assert ps.issame.tolist() == [True, False]
    assert ps.raw(0) == files[("id_a", 0)]
    assert Image.open(io.BytesIO(ps.raw(3))).size == (112, 112)  # the 150x130 image was resized


def test_cli_and_reindex(folder, tmp_path):
    root, _ = folder
    assert main(["folder2rec", str(root), str(tmp_path / "rec")]) == 0
    idx = tmp_path / "rec" / "train.idx"
    original = idx.read_text()
    idx.unlink()
    with pytest.raises(FileNotFoundError, match="train.idx"):
        RecordIODataset(str(tmp_path / "rec"))
    assert main(["reindex", str(tmp_path / "rec")]) == 0
    assert idx.read_text() == original
    assert main(["rec2folder", str(tmp_path / "rec"), str(tmp_path / "back")]) == 0
    assert len(ImageFolderFaces(str(tmp_path / "back"))) == 8


def test_unreadable_source_images_are_skipped(folder, tmp_path):
    root, _ = folder
    (root / "id_a" / "9.jpg").write_bytes(b"\xff\xd8 broken")
    stats = write_recordio(str(root), str(tmp_path / "rec"))
    assert stats["skipped"] == 1 and stats["images"] == 8
    assert len(RecordIODataset(str(tmp_path / "rec"))) == 8


@pytest.mark.parametrize("which", ["recordio", "folder"])
def test_data_configs_instantiate(which, folder, tmp_path):
    """configs/data/{recordio,folder}.yaml build a DataModule whose batches come from our datasets."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    root, _ = folder
    write_recordio(str(root), str(tmp_path / "rec"))
    pairs_to_bin_list = tmp_path / "pairs.txt"
    pairs_to_bin_list.write_text("id_a/0.jpg id_a/1.jpg 1\nid_a/2.jpg id_c/big.jpg 0\n" * 5)  # 10 folds of 1 pair
    for name in ("lfw", "cfp_fp", "agedb_30"):
        pairs_to_bin(str(pairs_to_bin_list), str(root), str(tmp_path / "rec" / f"{name}.bin"))
    cfg_path = os.path.join(os.path.dirname(__file__), "..", "configs", "data", f"{which}.yaml")
    data = OmegaConf.load(cfg_path)  # with the shared base its defaults list names, as Hydra composes it
    data.pop("defaults")
    data = OmegaConf.merge(OmegaConf.load(os.path.join(os.path.dirname(cfg_path), "..", "_shared", "data.yaml")), data)
    cfg = OmegaConf.create({"data": data, "seed": 0})  # data.seed: ${seed} comes from train.yaml
    cfg.data.root = str(tmp_path / "rec") if which == "recordio" else str(root)
    cfg.data.num_workers = 0
    cfg.data.batch_size = 4
    if which == "folder":  # verified on people the training folder does not hold: copies under other names
        held_out = tmp_path / "held_out"
        for person in ("id_a", "id_c"):
            shutil.copytree(root / person, held_out / f"held_{person}")
        held_pairs = tmp_path / "held_pairs.txt"
        held_pairs.write_text(pairs_to_bin_list.read_text().replace("id_", "held_id_"))
        cfg.data.val_sets.pairs_file = str(held_pairs)
        cfg.data.val_sets.image_root = str(held_out)
    dm = instantiate(cfg.data)
    dm.setup("fit")
    assert dm.num_classes == 3
    assert sorted(dm.val_sets) == (["agedb_30", "cfp_fp", "lfw"] if which == "recordio" else ["pairs"])
    images, labels = next(iter(dm.train_dataloader()))[:2]
    assert images.dtype == torch.uint8 and images.shape == (4, 3, 112, 112) and labels.dtype == torch.long
