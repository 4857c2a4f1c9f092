"""The low-resolution domain (`elasticface-convert lowres`) and the low-resolution augmentation: each face passes
through s x s pixels and keeps its size, path and pair; sizes drawn per file, the same in any order and on any
machine; unreadable and oversized files skipped and counted."""

from __future__ import annotations

import csv
import struct
import zlib

import numpy as np
import pytest

from helpers.exit_status import refused_line
import torch
from PIL import Image

from elasticface.cli.convert import main as convert
from elasticface.data.low_resolution import degrade, degrade_folder, drawn_size, parse_sizes
from elasticface.data.transforms import BatchAugment


def _detail(image: np.ndarray) -> float:
    """The energy of the finest detail: mean squared difference of neighbouring pixels."""
    x = image.astype(np.float64)
    return float(np.mean(np.diff(x, axis=0) ** 2) + np.mean(np.diff(x, axis=1) ** 2))


def _face(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (112, 112, 3), dtype=np.uint8)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height and whose pixels are not there: a decoder that trusts the
    header before the pixel limit allocates width x height x 3 bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) \
        + chunk(b"IEND", b"")


def test_sizes_parse_and_refuse_what_is_not_a_size():
    assert parse_sizes("16-32") == (16, 32) and parse_sizes("24") == (24, 24)
    for bad in ("32-16", "2-8", "16-200", "a-b", "16-24-32", ""):
        with pytest.raises(ValueError, match="--size"):
            parse_sizes(bad)


def test_each_file_gets_its_own_size_from_its_path_and_seed_not_from_order():
    names = [f"{i:03d}/frontal/{j:02d}.jpg" for i in range(20) for j in range(5)]
    sizes = [drawn_size(n, (16, 32)) for n in names]
    assert sizes == [drawn_size(n, (16, 32)) for n in reversed(names)][::-1]
    assert min(sizes) >= 16 and max(sizes) <= 32 and len(set(sizes)) >= 12, "spread over the range"
    assert sizes != [drawn_size(n, (16, 32), seed=1) for n in names], "another seed, another draw"
    assert drawn_size("a.jpg", (24, 24)) == 24


def test_degrading_keeps_the_shape_and_removes_detail_below_the_size():
    face = _face(0)
    out16, out32 = degrade(face, 16), degrade(face, 32)
    assert out16.shape == out32.shape == face.shape and out16.dtype == np.uint8
    assert _detail(out16) < _detail(out32) < _detail(face) / 4
    # what passes through 16 x 16 pixels: shrinking the result to 16 x 16 again gives about the same pixels
    again = np.asarray(Image.fromarray(out16).resize((16, 16), Image.Resampling.BICUBIC, reducing_gap=None))
    first = np.asarray(Image.fromarray(face).resize((16, 16), Image.Resampling.BICUBIC, reducing_gap=None))
    assert np.abs(again.astype(int) - first.astype(int)).mean() < 8


def test_a_folder_is_written_again_in_its_layout_with_a_manifest_and_bad_files_counted(tmp_path, caplog):
    src, out = tmp_path / "faces", tmp_path / "low"
    for person in ("001", "002"):
        for pose in ("frontal", "profile"):
            (src / person / pose).mkdir(parents=True)
            for j in range(2):
                Image.fromarray(_face(j)).save(src / person / pose / f"{j + 1:02d}.jpg", quality=95)
    Image.fromarray(_face(9)).save(src / "002" / "frontal" / "03.png")
    (src / "002" / "frontal" / "04.jpg").write_bytes(b"not a jpeg")
    (src / "002" / "frontal" / "05.png").write_bytes(_png_header_only(100_000, 100_000))
    with caplog.at_level("WARNING"):
        done = degrade_folder(src, out, (16, 32))
    assert done == {"images": 9, "skipped": 2, "sizes": "16-32"}
    named = " ".join(r.getMessage() for r in caplog.records)
    assert "04.jpg" in named and "05.png" in named
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.suffix in (".jpg", ".png"))
    assert written == sorted(p.relative_to(src).as_posix() for p in src.rglob("*")
                             if p.is_file() and p.name not in ("04.jpg", "05.png"))
    assert Image.open(out / "002" / "frontal" / "03.png").format == "PNG", "a .png stays a PNG: pair lists find it"
    rows = list(csv.DictReader(open(out / "lowres.csv")))
    assert {r["path"]: int(r["size"]) for r in rows} == {r["path"]: drawn_size(r["path"], (16, 32)) for r in rows}
    image = np.asarray(Image.open(out / "001" / "frontal" / "01.jpg"))
    assert image.shape == (112, 112, 3) and _detail(image) < _detail(_face(0)) / 4


def test_the_command_writes_the_domain_and_refuses_writing_over_its_input(tmp_path, capsys):
    (tmp_path / "faces" / "a").mkdir(parents=True)
    Image.fromarray(_face(1)).save(tmp_path / "faces" / "a" / "1.jpg")
    assert convert(["lowres", str(tmp_path / "faces"), str(tmp_path / "low"), "--size", "20-24"]) == 0
    assert "images=1 skipped=0 sizes=20-24" in capsys.readouterr().out
    assert "the output folder is the input folder" in refused_line(
        convert, ["lowres", str(tmp_path / "faces"), str(tmp_path / "faces")], capsys)
    assert "no_such: not a folder" in refused_line(
        convert, ["lowres", str(tmp_path / "no_such"), str(tmp_path / "out")], capsys)


def test_the_augmentation_shrinks_the_chosen_images_only():
    torch.manual_seed(0)
    images = torch.rand(8, 3, 112, 112) * 2 - 1
    every = BatchAugment(low_res_p=1.0, low_res_px=[16, 16])(images.clone())
    expected = torch.nn.functional.interpolate(
        torch.nn.functional.interpolate(images, size=(16, 16), mode="bilinear", antialias=True),
        size=(112, 112), mode="bicubic").clamp(-1, 1)
    torch.testing.assert_close(every, expected)
    torch.testing.assert_close(BatchAugment(low_res_p=0.0)(images.clone()), images)
    some = BatchAugment(low_res_p=0.5, low_res_px=[16, 32])(images.clone())
    changed = (some - images).abs().flatten(1).amax(1) > 1e-6
    assert 0 < int(changed.sum()) < 8, "each image drawn on its own"
    for bad in ({"low_res_p": 1.5}, {"low_res_px": [32, 16]}, {"low_res_px": [16]}, {"low_res_px": [2, 8]}):
        with pytest.raises(ValueError, match="data.augment.low_res"):
            BatchAugment(**bad)
