"""RecordIO reader against hand-built bytes (the format, not our writer), plus bad-input handling."""

from __future__ import annotations

import io
import logging
import os
import pickle
import struct

import numpy as np
import pytest
import torch

from elasticface.data.recordio import RecordIOWriter, encode_record, read_record
from elasticface.data.faults import DroppedRecord, FaultLedger, TooManyCorruptRecords
from elasticface.data.recordio_dataset import RecordIODataset
from elasticface.data.sampler import IdentityBatchSampler

from helpers.images import rgb_of, smooth_jpeg
from helpers.recordio_files import MAGIC, MAGIC_B, ifqq, whole, write_files


def jpeg_with_aligned_magic(seed: int) -> tuple[bytes, int]:
    """A valid JPEG whose payload (after the 24-byte header) holds the magic at a 4-aligned offset."""
    jpeg = smooth_jpeg(seed)
    pad = (-(24 + len(jpeg))) % 4
    data = jpeg + b"\0" * pad + MAGIC_B + b"tail"  # bytes after EOI are ignored by JPEG decoders
    return data, 24 + len(jpeg) + pad


def legacy_root(tmp_path, n_per_class=(3, 2, 4), with_magic_key: int | None = 2):
    """Legacy insightface layout built byte by byte; returns root, jpegs by key, labels by key."""
    n, c = sum(n_per_class), len(n_per_class)
    records = [(0, whole(ifqq(2, 0.0, 0, 0, [n + 1, n + 1 + c])))]
    jpegs, labels, key = {}, {}, 1
    for label, count in enumerate(n_per_class):
        for _ in range(count):
            if key == with_magic_key:
                data, at = jpeg_with_aligned_magic(key)
                payload = ifqq(0, float(label), key) + data
                a, b = payload[:at], payload[at + 4:]
                framed = (struct.pack("<II", MAGIC, (1 << 29) | len(a)) + a
                          + struct.pack("<II", MAGIC, (3 << 29) | len(b)) + b + b"\0" * ((-len(b)) % 4))
            else:
                data = smooth_jpeg(key)
                framed = whole(ifqq(0, float(label), key) + data)
            records.append((key, framed))
            jpegs[key], labels[key] = data, label
            key += 1
    start = 1
    for label, count in enumerate(n_per_class):
        records.append((n + 1 + label, whole(ifqq(2, 0.0, n + 1 + label, 0, [start, start + count]))))
        start += count
    write_files(tmp_path, records, f"{c},112,112\n")
    return str(tmp_path), jpegs, labels


# ---------------------------------------------------------------------------------------------- framing


def test_multi_chunk_bytes_match_the_format():
    a, b, c = b"A" * 8, b"B" * 12, b"C" * 5
    payload = a + MAGIC_B + b + MAGIC_B + c
    expected = (struct.pack("<II", MAGIC, (1 << 29) | 8) + a + struct.pack("<II", MAGIC, (2 << 29) | 12) + b
                + struct.pack("<II", MAGIC, (3 << 29) | 5) + c + b"\0\0\0")
    assert encode_record(payload) == expected
    assert read_record(io.BytesIO(expected), 0) == payload


def test_unaligned_magic_is_not_split():
    payload = b"xy" + MAGIC_B + b"zz"
    assert encode_record(payload) == whole(payload)
    assert read_record(io.BytesIO(whole(payload)), 0) == payload


def test_magic_at_payload_end_and_start():
    for payload in (MAGIC_B, MAGIC_B + b"abcd", b"abcd" + MAGIC_B):
        framed = encode_record(payload)
        assert read_record(io.BytesIO(framed), 0) == payload


# ---------------------------------------------------------------------------------------------- layouts


def test_legacy_layout_labels_and_pixels(tmp_path):
    root, jpegs, labels = legacy_root(tmp_path)
    ds = RecordIODataset(root)
    assert ds.layout == "legacy" and ds.num_classes == 3 and len(ds) == 9
    assert ds.labels.dtype == np.int64
    assert ds.labels.tolist() == [labels[k] for k in range(1, 10)]
    for i in range(len(ds)):
        img, label = ds[i]
        assert img.dtype == torch.uint8 and img.shape == (3, 112, 112)
        assert label == labels[i + 1]
        ref = rgb_of(jpegs[i + 1])
        assert np.abs(img.permute(1, 2, 0).numpy().astype(int) - ref.astype(int)).max() <= 3  # libjpeg IDCT differences
    assert ds.num_corrupt == 0


def test_pil_and_torchvision_decoders_agree(tmp_path):
    root, jpegs, _ = legacy_root(tmp_path)
    a, b = RecordIODataset(root, decoder="pil"), RecordIODataset(root, decoder="torchvision")
    assert np.array_equal(a[0][0].numpy(), rgb_of(jpegs[1]).transpose(2, 0, 1))
    assert (a[0][0].int() - b[0][0].int()).abs().max() <= 3


def test_im2rec_layout_vector_labels_and_rounding(tmp_path):
    jp = [smooth_jpeg(i) for i in range(4)]
    below3 = float(np.nextafter(np.float32(3), np.float32(0)))  # 2.9999998: truncation would give 2
    records = [
        (10, whole(ifqq(0, 0.0, 10) + jp[0])),
        (11, whole(ifqq(0, below3, 11) + jp[1])),
        (12, whole(ifqq(2, 0.0, 12, 0, [1.0, 7.0]) + jp[2])),  # vector label: class is the first entry
        (13, whole(ifqq(0, 2.0, 13) + jp[3])),
    ]
    write_files(tmp_path, records)  # no property: classes from the labels
    ds = RecordIODataset(str(tmp_path))
    assert ds.layout == "im2rec"
    assert ds.labels.tolist() == [0, 3, 1, 2] and ds.num_classes == 4
    assert ds[1][1] == 3 and ds[2][1] == 1


def test_num_classes_mismatch(tmp_path):
    root, _, _ = legacy_root(tmp_path)
    assert RecordIODataset(root, num_classes=3).num_classes == 3
    with pytest.raises(ValueError, match="num_classes=5.*3 classes"):
        RecordIODataset(root, num_classes=5)


def test_property_disagrees_with_header(tmp_path):
    root, _, _ = legacy_root(tmp_path)
    with open(os.path.join(root, "property"), "w") as f:
        f.write("7,112,112\n")
    with pytest.raises(ValueError, match="property says 7.*says 3"):
        RecordIODataset(root)


def test_pickle_drops_handle_and_workers_read(tmp_path):
    root, _, labels = legacy_root(tmp_path)
    ds = RecordIODataset(root)
    ds[0]  # opens the file: an open file object cannot be pickled, so this pickle proves the handle stays behind
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[3][0], ds[3][0])
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2, shuffle=False)
    got = torch.cat([y for _, y in loader]).tolist()
    assert got == [labels[k] for k in range(1, 10)]


def test_writer_round_trip_with_split_records(tmp_path):
    data, _ = jpeg_with_aligned_magic(5)
    items = [(1, 0, smooth_jpeg(1)), (2, 1, data), (3, 1, smooth_jpeg(3))]
    with RecordIOWriter(str(tmp_path / "train.rec")) as w:
        for key, label, jpeg in items:
            w.write_image(key, float(label), jpeg)
    assert w.num_split_records == 1
    ds = RecordIODataset(str(tmp_path))
    for i, (key, label, jpeg) in enumerate(items):
        raw, lab = ds.read_raw(i)
        assert raw == jpeg and lab == label


# ---------------------------------------------------------------------------------------------- bad input


def test_missing_idx_names_path_and_layout(tmp_path):
    root, _, _ = legacy_root(tmp_path)
    os.remove(os.path.join(root, "train.idx"))
    with pytest.raises(FileNotFoundError, match=r"train\.idx.*train\.rec, train\.idx and property"):
        RecordIODataset(root)


def test_missing_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        RecordIODataset(str(tmp_path / "nope"))


def test_corrupt_jpeg_is_skipped_and_counted(tmp_path, caplog):
    jp = smooth_jpeg(0)
    records = [(0, whole(ifqq(0, 0.0, 0) + jp)), (1, whole(ifqq(0, 1.0, 1) + jp[:200])),
               (2, whole(ifqq(0, 1.0, 2) + b"\xff\xd8 not a jpeg at all"))]
    write_files(tmp_path, records, "2,112,112\n")
    ds = RecordIODataset(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert ds[0] is not None and isinstance(ds[1], DroppedRecord) and isinstance(ds[2], DroppedRecord)
    assert ds.num_corrupt == 2 and ds.corrupt_keys == [1, 2]
    dropped = ds[1]
    assert dropped.source.endswith("train.rec") and dropped.key == "1" and "decode" in dropped.reason
    with caplog.at_level(logging.WARNING):
        FaultLedger(10).add([dropped])  # logged once, where the run counts it
    assert "corrupt record 1" in caplog.text and "train.rec" in caplog.text


def test_wrong_magic(tmp_path):
    root, _, _ = legacy_root(tmp_path)
    rec = os.path.join(root, "train.rec")
    offsets = dict(tuple(map(int, line.split())) for line in open(os.path.join(root, "train.idx")))
    with open(rec, "r+b") as f:
        f.seek(offsets[4])
        f.write(b"\xde\xad\xbe\xef")
    ds = RecordIODataset(root)
    assert isinstance(ds[3], DroppedRecord) and ds.corrupt_keys == [4]
    assert ds[4] is not None


def test_idx_offset_past_end(tmp_path):
    jp = smooth_jpeg(0)
    write_files(tmp_path, [(0, whole(ifqq(0, 0.0, 0) + jp)), (1, whole(ifqq(0, 1.0, 1) + jp))], "2,112,112\n")
    with open(tmp_path / "train.idx", "a") as f:
        f.write("2\t99999999\n")
    ds = RecordIODataset(str(tmp_path))  # im2rec: headers are read up front, the bad key is dropped
    assert len(ds) == 2 and ds.corrupt_keys == [2]
    root, _, _ = legacy_root(tmp_path / "legacy")
    idx = os.path.join(root, "train.idx")
    lines = open(idx).read().splitlines()
    lines[5] = "5\t99999999"
    open(idx, "w").write("\n".join(lines) + "\n")
    ds = RecordIODataset(root)  # legacy: labels from ranges, the record fails when read
    assert isinstance(ds[4], DroppedRecord) and ds.corrupt_keys == [5]


def test_truncated_rec(tmp_path):
    jp = smooth_jpeg(0)
    write_files(tmp_path, [(k, whole(ifqq(0, float(k % 2), k) + jp)) for k in range(4)], "2,112,112\n")
    rec = tmp_path / "train.rec"
    size = rec.stat().st_size
    with open(rec, "r+b") as f:
        f.truncate(size - 100)  # the last record loses its tail
    ds = RecordIODataset(str(tmp_path))
    assert len(ds) == 4
    assert ds[2] is not None and isinstance(ds[3], DroppedRecord) and ds.corrupt_keys == [3]
    # legacy layout truncated inside the identity ranges: labels fall back to the image headers
    root, _, labels = legacy_root(tmp_path / "legacy")
    rec = os.path.join(root, "train.rec")
    with open(rec, "r+b") as f:
        f.truncate(os.path.getsize(rec) - 10)
    ds = RecordIODataset(root)
    assert ds.labels.tolist() == [labels[k] for k in range(1, 10)]


def test_label_out_of_range(tmp_path):
    jp = smooth_jpeg(0)
    write_files(tmp_path, [(0, whole(ifqq(0, 0.0, 0) + jp)), (1, whole(ifqq(0, 5.0, 1) + jp)),
                           (2, whole(ifqq(0, -1.0, 2) + jp)), (3, whole(ifqq(0, 1.0, 3) + jp))], "2,112,112\n")
    ds = RecordIODataset(str(tmp_path))
    assert len(ds) == 2 and sorted(ds.corrupt_keys) == [1, 2] and ds.labels.tolist() == [0, 1]
    # in the legacy layout the image header is checked when the record is read
    n = 2
    records = [(0, whole(ifqq(2, 0.0, 0, 0, [n + 1, n + 2]))), (1, whole(ifqq(0, 0.0, 1) + jp)),
               (2, whole(ifqq(0, 9.0, 2) + jp)), (3, whole(ifqq(2, 0.0, 3, 0, [1, 3])))]
    write_files(tmp_path / "legacy", records, "1,112,112\n")
    ds = RecordIODataset(str(tmp_path / "legacy"))
    assert ds[0] is not None and isinstance(ds[1], DroppedRecord) and ds.corrupt_keys == [2]


def test_too_many_corrupt_records_raise_naming_file(tmp_path):
    jp = smooth_jpeg(0)
    write_files(tmp_path, [(k, whole(ifqq(0, 0.0, k) + (jp if k == 0 else b"junk"))) for k in range(6)], "1,112,112\n")
    ds = RecordIODataset(str(tmp_path), max_corrupt=3)
    ledger = FaultLedger(ds.max_corrupt)
    for _ in range(3):  # every epoch reads the same bad records again: still 3 distinct
        ledger.add([ds[i] for i in range(1, 4)])
    assert ledger.num_corrupt == 3
    message = r"4 distinct corrupt records.*max_corrupt=3.*train\.rec: keys 1, 2, 3, 4"
    with pytest.raises(TooManyCorruptRecords, match=message):
        ledger.add([ds[4]])


# ---------------------------------------------------------------------------------------------- sampler & dali


def test_identity_sampler_p_by_k_and_ddp_split():
    labels = np.repeat(np.arange(20), [1, 2, 3, 9, 4] * 4)
    full = IdentityBatchSampler(labels, batch_size=12, images_per_identity=3, num_replicas=1, rank=0, seed=1)
    batches = list(full)
    assert len(batches) == len(full) > 0
    for b in batches:
        assert len(b) == 12
        ids, counts = np.unique(labels[b], return_counts=True)
        assert len(ids) == 4 and (counts == 3).all()
    r0 = list(IdentityBatchSampler(labels, 12, 3, num_replicas=2, rank=0, seed=1))
    r1 = list(IdentityBatchSampler(labels, 12, 3, num_replicas=2, rank=1, seed=1))
    assert len(r0) == len(r1) and r0 != r1
    s = IdentityBatchSampler(labels, 12, 3, num_replicas=1, rank=0, seed=1)
    s.set_epoch(1)
    assert list(s) != batches
    with pytest.raises(ValueError, match="multiple"):
        IdentityBatchSampler(labels, 10, 3)


def test_identity_sampler_on_recordio(tmp_path):
    root, _, _ = legacy_root(tmp_path)
    ds = RecordIODataset(root)
    sampler = IdentityBatchSampler(ds, batch_size=4, images_per_identity=2)
    loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler)
    for images, labels in loader:
        assert images.shape == (4, 3, 112, 112) and len(set(labels.tolist())) == 2


def test_dali_missing_gives_clear_error(tmp_path):
    from elasticface.data import dali

    try:
        import nvidia.dali  # noqa: F401

        has_dali = True
    except ImportError:
        has_dali = False
    if has_dali and torch.cuda.is_available():
        pytest.skip("DALI and CUDA present: covered by the gpu test")
    with pytest.raises((ImportError, RuntimeError), match="data.decoder"):
        dali.require_dali()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_dali_loader_matches_cpu(tmp_path):
    pytest.importorskip("nvidia.dali")
    from elasticface.data.dali import DaliRecordIOLoader

    root, _, labels = legacy_root(tmp_path, n_per_class=(4, 4, 4), with_magic_key=None)
    loader = DaliRecordIOLoader(RecordIODataset(root), batch_size=4, num_threads=1, hflip=False,
                                cache_dir=str(tmp_path / "cache"))
    seen = []
    for images, labs, skipped in loader:
        assert images.is_cuda and images.dtype == torch.uint8 and images.shape == (4, 3, 112, 112)
        seen += labs.tolist()
    assert sorted(seen) == sorted(labels.values())
