"""LFW from its own files: `elasticface-convert pairs2bin` reads LFW's pairs.txt against an LFW-layout folder.

The files here are written in LFW's published layout (a "folds n" header, n matched `name n1 n2` lines then n
mismatched `name1 n1 name2 n2` lines per fold, tab-separated; photos `<Name>/<Name>_<nnnn>.jpg`); the expected
pairs are spelled out by the test, not derived by the code under test.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from helpers.exit_status import refused_line
from PIL import Image

from elasticface.cli.convert import main as convert_main
from elasticface.data.pair_files import load_bin, pairs_from_list

PEOPLE = {"Abel_Pacheco": 4, "Akhmed_Zakayev": 3, "Dean_Barker": 1, "Zico": 3}
#: 2 folds of 2 matched then 2 mismatched pairs
PAIRS_TXT = """2\t2
Abel_Pacheco\t1\t4
Akhmed_Zakayev\t1\t3
Abel_Pacheco\t2\tDean_Barker\t1
Akhmed_Zakayev\t2\tZico\t1
Zico\t2\t3
Abel_Pacheco\t3\t1
Dean_Barker\t1\tZico\t3
Zico\t1\tAbel_Pacheco\t4
"""
EXPECTED = [  # (photo a, photo b, same person), in file order
    ("Abel_Pacheco/Abel_Pacheco_0001.jpg", "Abel_Pacheco/Abel_Pacheco_0004.jpg", True),
    ("Akhmed_Zakayev/Akhmed_Zakayev_0001.jpg", "Akhmed_Zakayev/Akhmed_Zakayev_0003.jpg", True),
    ("Abel_Pacheco/Abel_Pacheco_0002.jpg", "Dean_Barker/Dean_Barker_0001.jpg", False),
    ("Akhmed_Zakayev/Akhmed_Zakayev_0002.jpg", "Zico/Zico_0001.jpg", False),
    ("Zico/Zico_0002.jpg", "Zico/Zico_0003.jpg", True),
    ("Abel_Pacheco/Abel_Pacheco_0003.jpg", "Abel_Pacheco/Abel_Pacheco_0001.jpg", True),
    ("Dean_Barker/Dean_Barker_0001.jpg", "Zico/Zico_0003.jpg", False),
    ("Zico/Zico_0001.jpg", "Abel_Pacheco/Abel_Pacheco_0004.jpg", False),
]


@pytest.fixture()
def lfw(tmp_path):
    """An LFW-layout folder of distinct 112x112 JPEGs and LFW's pairs.txt for it."""
    root = tmp_path / "lfw"
    rng = np.random.default_rng(5)
    for name, count in PEOPLE.items():
        (root / name).mkdir(parents=True)
        for i in range(1, count + 1):
            Image.fromarray(rng.integers(0, 256, (112, 112, 3), dtype=np.uint8)).save(
                root / name / f"{name}_{i:04d}.jpg", quality=95)
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(PAIRS_TXT)
    return root, pairs


def test_pairs2bin_reads_lfw_pairs_txt(lfw, tmp_path, capsys):
    root, pairs = lfw
    out = tmp_path / "lfw.bin"
    assert convert_main(["pairs2bin", str(pairs), str(root), str(out)]) == 0
    assert "pairs=8 positives=4" in capsys.readouterr().out
    pair_set = load_bin(str(out), "lfw")
    assert pair_set.issame.tolist() == [same for _, _, same in EXPECTED]
    # 112x112 JPEGs are stored byte for byte, in pair order
    import pickle

    with open(out, "rb") as f:
        bins, _ = pickle.load(f)  # our own file, written a moment ago
    want = [(root / path).read_bytes() for a, b, _ in EXPECTED for path in (a, b)]
    assert [bytes(b) for b in bins] == want
    assert np.asarray(Image.open(io.BytesIO(bins[0]))).shape == (112, 112, 3)


def test_eval_pairs_file_takes_lfw_pairs_txt(lfw):
    root, pairs = lfw
    pair_set = pairs_from_list(str(pairs), str(root))
    assert pair_set.issame.tolist() == [same for _, _, same in EXPECTED] and pair_set.num_pairs == 8


def test_aligned_copy_with_png_suffix_is_found(lfw):
    root, pairs = lfw
    photo = root / "Zico" / "Zico_0002.jpg"
    Image.open(photo).save(photo.with_suffix(".png"))
    photo.unlink()
    assert pairs_from_list(str(pairs), str(root)).num_pairs == 8


@pytest.mark.parametrize("line, replacement, message", [
    ("Akhmed_Zakayev\t1\t3", "Akhmed_Zakayev\t1\tZico\t3",
     r"pairs.txt:3: expected a matched pair 'name n1 n2' \(fold 1, pair 2 of 4\)"),
    ("Dean_Barker\t1\tZico\t3", "Dean_Barker\t1\t3", r"pairs.txt:8: expected a mismatched pair 'name1 n1 name2 n2'"),
    ("Zico\t2\t3", "Zico\tb\t3", r"pairs.txt:6: photo number 'b' of Zico is not a positive integer"),
    ("Zico\t1\tAbel_Pacheco\t4\n", "", r"announces 2 fold\(s\) of 2 matched and 2 mismatched pairs \(8 lines\), but 7"),
])
def test_bad_lines_are_named_with_file_and_line(lfw, tmp_path, line, replacement, message, capsys):
    root, pairs = lfw
    pairs.write_text(PAIRS_TXT.replace(line, replacement))
    said = refused_line(convert_main, ["pairs2bin", str(pairs), str(root), str(tmp_path / "lfw.bin")], capsys)
    assert re.search(message, said), said


def test_a_missing_photo_drops_its_pair_named_counted_and_loud(lfw, tmp_path, capsys, caplog):
    """pairs2bin goes on without the pair, names the line and the photo, counts it and warns that the .bin is
    then not the protocol; the evaluation itself still refuses (fewer pairs is not the benchmark)."""
    root, pairs = lfw
    (root / "Zico" / "Zico_0003.jpg").unlink()  # named by lines 6 (Zico 2 3) and 8 (Dean_Barker 1 Zico 3)
    out = tmp_path / "lfw.bin"
    with caplog.at_level("WARNING"):
        assert convert_main(["pairs2bin", str(pairs), str(root), str(out)]) == 0
    assert "pairs=6 positives=3 skipped_pairs=2" in capsys.readouterr().out
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [w.split(": photo")[0] for w in warnings[:2]] == [f"{pairs}:6", f"{pairs}:8"]
    assert all("Zico_0003.jpg not found" in w for w in warnings[:2])
    assert "2 of the 8 pairs" in warnings[2] and "LEFT OUT" in warnings[2] and "not comparable" in warnings[2]
    kept = [same for i, (_, _, same) in enumerate(EXPECTED) if i not in (4, 6)]
    assert load_bin(str(out), "lfw").issame.tolist() == kept
    with pytest.raises(FileNotFoundError, match=r"pairs.txt:6: photo .*Zico_0003.jpg not found"):
        pairs_from_list(str(pairs), str(root))


def test_a_folder_without_the_lfw_layout_is_an_error_naming_it(lfw, tmp_path, capsys):
    _, pairs = lfw
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.new("RGB", (112, 112)).save(flat / "Zico_0001.jpg")  # photos, but not in <Name>/ folders
    said = refused_line(convert_main, ["pairs2bin", str(pairs), str(flat), str(tmp_path / "lfw.bin")], capsys)
    assert re.search(rf"{flat}: not one photo of the 8 pairs .*pairs.txt names is there", said), said
    assert not (tmp_path / "lfw.bin").exists()


def test_development_list_header_is_one_number(lfw):
    root, pairs = lfw
    pairs.write_text("1\nZico\t2\t3\nDean_Barker\t1\tZico\t3\n")
    assert pairs_from_list(str(pairs), str(root)).issame.tolist() == [True, False]


# -- CFP's protocol folder ---------------------------------------------------------------------------------

CFP_FOLDS = {  # fold -> (same 'frontal,profile' lines, diff lines)
    "01": (["1,1", "2,2"], ["1,3", "3,1"]),
    "02": (["3,3"], ["2,1"]),
}


@pytest.fixture()
def cfp(tmp_path):
    """CFP's layout: Data/Images/<id>/{frontal,profile}/NN.jpg, Protocol/Pair_list_{F,P}.txt, Split/FP/NN/."""
    root = tmp_path / "cfp-dataset"
    rng = np.random.default_rng(6)
    for side in ("F", "P"):
        lines = []
        for person in (1, 2, 3):
            folder = root / "Data" / "Images" / f"{person:03d}" / ("frontal" if side == "F" else "profile")
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (112, 112, 3), dtype=np.uint8)).save(folder / "01.jpg")
            lines.append(f"{person} ../Data/Images/{person:03d}/{folder.name}/01.jpg")
        (root / "Protocol").mkdir(exist_ok=True)
        (root / "Protocol" / f"Pair_list_{side}.txt").write_text("\n".join(lines) + "\n")
    for fold, (same, diff) in CFP_FOLDS.items():
        (root / "Protocol" / "Split" / "FP" / fold).mkdir(parents=True)
        (root / "Protocol" / "Split" / "FP" / fold / "same.txt").write_text("\n".join(same) + "\n")
        (root / "Protocol" / "Split" / "FP" / fold / "diff.txt").write_text("\n".join(diff) + "\n")
    return root


def test_pairs2bin_reads_cfp_fp_protocol(cfp, tmp_path):
    import pickle

    out = tmp_path / "cfp_fp.bin"
    assert convert_main(["pairs2bin", str(cfp / "Protocol" / "Split" / "FP"), str(cfp / "Data" / "Images"),
                         str(out)]) == 0
    with open(out, "rb") as f:
        bins, issame = pickle.load(f)  # our own file, written a moment ago
    photo = {(side, i): (cfp / "Data" / "Images" / f"{i:03d}" / side / "01.jpg").read_bytes()
             for side in ("frontal", "profile") for i in (1, 2, 3)}
    want = [(1, 1, True), (2, 2, True), (1, 3, False), (3, 1, False), (3, 3, True), (2, 1, False)]
    assert issame == [s for _, _, s in want]
    assert [bytes(b) for b in bins] == [p for f, q, _ in want for p in (photo["frontal", f], photo["profile", q])]


def test_cfp_bad_lines_and_indices_are_named(cfp, tmp_path):
    split = cfp / "Protocol" / "Split" / "FP"
    images = str(cfp / "Data" / "Images")
    (split / "02" / "diff.txt").write_text("2,1\n2;1\n")
    with pytest.raises(ValueError, match=r"02/diff.txt:2: expected 'i,j' \(two photo indices\), got '2;1'"):
        pairs_from_list(str(split), images)
    (split / "02" / "diff.txt").write_text("2,9\n")
    with pytest.raises(ValueError, match=r"02/diff.txt:1: photo index 9 is not in .*Pair_list_P.txt"):
        pairs_from_list(str(split), images)
    (split / "02" / "diff.txt").write_text("2,1\n")
    (cfp / "Data" / "Images" / "003" / "profile" / "01.jpg").unlink()
    with pytest.raises(FileNotFoundError, match=r"01/diff.txt:1: photo .*003/profile/01.jpg not found"):
        pairs_from_list(str(split), images)


def test_cfp_ff_pairs_two_frontal_photos(cfp):
    split = cfp / "Protocol" / "Split" / "FF"
    (split / "01").mkdir(parents=True)
    (split / "01" / "same.txt").write_text("1,1\n")
    (split / "01" / "diff.txt").write_text("1,2\n")
    pairs = pairs_from_list(str(split), str(cfp / "Data" / "Images"))
    assert pairs.issame.tolist() == [True, False]
    assert pairs.raw(3) == (cfp / "Data" / "Images" / "002" / "frontal" / "01.jpg").read_bytes()
