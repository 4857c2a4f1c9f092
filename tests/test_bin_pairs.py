"""insightface `.bin` verification sets: our round trip, Python 2 pickles, numpy entries, discovery."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
import torch

from elasticface.data.pair_files import EncodedPairSet, find_bin_sets, load_bin, pairs_from_list, write_bin
from elasticface.data.pairs import PairSet
from helpers.images import rgb_of, smooth_jpeg


def py2_pickle(images: list[bytes], issame: list[bool]) -> bytes:
    """What Python 2's cPickle.dump((bins, issame), f, protocol=2) emits: images as py2 `str` (BINSTRING)."""
    out = bytearray(b"\x80\x02")            # PROTO 2
    out += b"]("                            # EMPTY_LIST, MARK
    for img in images:
        out += b"T" + struct.pack("<I", len(img)) + img  # BINSTRING: a Python 2 str
    out += b"e"                             # APPENDS
    out += b"]("
    for s in issame:
        out += b"\x88" if s else b"\x89"    # NEWTRUE / NEWFALSE
    out += b"e"
    out += b"\x86."                         # TUPLE2, STOP
    return bytes(out)


def test_write_then_load_is_identical(tmp_path):
    imgs = [smooth_jpeg(i) for i in range(6)]
    path = str(tmp_path / "lfw.bin")
    write_bin(path, imgs, [True, False, True])
    ps = load_bin(path)
    assert isinstance(ps, PairSet) and ps.name == "lfw" and ps.num_pairs == 3 and len(ps) == 6
    assert ps.issame.tolist() == [True, False, True]
    assert [ps.raw(i) for i in range(6)] == imgs
    bins, issame = pickle.load(open(path, "rb"), encoding="bytes")  # how insightface reads it
    assert bins == imgs and issame == [True, False, True]
    for i in (0, 5):
        img, idx = ps[i]
        assert idx == i and img.dtype == torch.uint8 and img.shape == (3, 112, 112)
        assert np.abs(img.permute(1, 2, 0).numpy().astype(int) - rgb_of(imgs[i]).astype(int)).max() <= 3


def test_write_encodes_arrays(tmp_path):
    arr = rgb_of(smooth_jpeg(1))
    path = str(tmp_path / "x.bin")
    write_bin(path, [arr, arr], [True])
    img = load_bin(path)[0][0].permute(1, 2, 0).numpy().astype(int)
    assert np.abs(img - arr.astype(int)).mean() < 2  # quality-95 JPEG round trip
    with pytest.raises(ValueError, match="3 images for 1 pairs"):
        write_bin(path, [arr] * 3, [True])


def test_python2_pickle_with_str_entries(tmp_path):
    imgs = [smooth_jpeg(i) for i in range(4)]
    raw = py2_pickle(imgs, [False, True])
    with pytest.raises(UnicodeDecodeError):
        pickle.loads(raw)  # the default ASCII decoding fails: encoding="bytes" is required
    path = tmp_path / "agedb_30.bin"
    path.write_bytes(raw)
    ps = load_bin(str(path))
    assert ps.name == "agedb_30" and ps.issame.tolist() == [False, True]
    assert [ps.raw(i) for i in range(4)] == imgs
    assert ps[2][0].shape == (3, 112, 112)


def test_numpy_uint8_entries(tmp_path):
    imgs = [smooth_jpeg(i) for i in range(4)]
    entries = [np.frombuffer(b, dtype=np.uint8) for b in imgs]
    path = tmp_path / "cfp_fp.bin"
    path.write_bytes(pickle.dumps((entries, np.array([True, False])), protocol=2))
    ps = load_bin(str(path))
    assert [ps.raw(i) for i in range(4)] == imgs and ps.issame.tolist() == [True, False]
    assert ps[1][0].shape == (3, 112, 112)


def test_untrusted_pickle_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.bin"
    path.write_bytes(pickle.dumps(([Evil(), b"x"], [True])))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        load_bin(str(path))


def test_bad_entries_and_missing_file(tmp_path):
    path = tmp_path / "odd.bin"
    path.write_bytes(pickle.dumps(([1, 2], [True])))
    with pytest.raises(ValueError, match="image entry 0 is int"):
        load_bin(str(path))
    with pytest.raises(FileNotFoundError, match="nothere.bin"):
        load_bin(str(tmp_path / "nothere.bin"))
    write_bin(str(path), [b"\xff\xd8broken", smooth_jpeg(0)], [True])
    with pytest.raises(ValueError, match="'odd'.*image 0 is unreadable"):
        load_bin(str(path))[0]


def test_find_bin_sets(tmp_path):
    for name in ("lfw", "cfp_fp", "agedb_30"):
        write_bin(str(tmp_path / f"{name}.bin"), [smooth_jpeg(0), smooth_jpeg(1)], [True])
    sets = find_bin_sets(str(tmp_path), ["lfw", "agedb_30"])
    assert list(sets) == ["lfw", "agedb_30"] and all(isinstance(s, PairSet) for s in sets.values())
    assert list(find_bin_sets(str(tmp_path))) == ["agedb_30", "cfp_fp", "lfw"]
    with pytest.raises(FileNotFoundError, match=r"\['calfw'\].*'agedb_30', 'cfp_fp', 'lfw'"):
        find_bin_sets(str(tmp_path), ["lfw", "calfw"])
    with pytest.raises(FileNotFoundError, match="not a directory"):
        find_bin_sets(str(tmp_path / "nope"), ["lfw"])


def test_find_bin_sets_uses_the_sets_that_exist_and_says_which(tmp_path, caplog):
    """As insightface: a folder with only lfw.bin validates on lfw; none at all, or a named missing set, fails."""
    import logging

    write_bin(str(tmp_path / "lfw.bin"), [smooth_jpeg(0), smooth_jpeg(1)], [True])
    with caplog.at_level(logging.INFO):
        assert list(find_bin_sets(str(tmp_path))) == ["lfw"]
    assert "lfw" in caplog.text and str(tmp_path) in caplog.text
    (tmp_path / "lfw.bin").unlink()
    with pytest.raises(FileNotFoundError, match="no .bin verification sets.*data.val_sets=null"):
        find_bin_sets(str(tmp_path))


def test_pairs_from_list(tmp_path):
    (tmp_path / "a").mkdir()
    for i in range(3):
        (tmp_path / "a" / f"{i}.jpg").write_bytes(smooth_jpeg(i, size=100))
    lst = tmp_path / "pairs.txt"
    lst.write_text("a/0.jpg a/1.jpg 1\n\na/1.jpg a/2.jpg 0\n")
    ps = pairs_from_list(str(lst), str(tmp_path), "mine")
    assert isinstance(ps, EncodedPairSet) and ps.issame.tolist() == [True, False]
    assert ps[0][0].shape == (3, 112, 112) and ps.stats.resized == 1
    lst.write_text("a/0.jpg a/1.jpg yes\n")
    with pytest.raises(ValueError, match=r"pairs.txt:1: expected 'path1 path2 0\|1'"):
        pairs_from_list(str(lst), str(tmp_path))
    lst.write_text("a/0.jpg a/9.jpg 1\n")
    with pytest.raises(FileNotFoundError, match="9.jpg"):
        pairs_from_list(str(lst), str(tmp_path))
