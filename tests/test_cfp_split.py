"""The CFP split (people of splits 1-5 train; CFP-FP and CFP-FF pairs of splits 6-10 verify) on a small folder in
CFP's own layout: `Protocol/Pair_list_F.txt` and `Pair_list_P.txt` (`index path`), `Protocol/Split/FP|FF/01..10/
same.txt|diff.txt` (`i,j`), `Data/Images/<id>/frontal|profile/NN.jpg`. The expected split is derived from what the
test wrote, not from the code under test.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from elasticface.cli.cfp_split import main
from elasticface.data.cfp_split import split_cfp
from helpers.images import smooth_jpeg

FRONTAL, PROFILE, PER_SPLIT = 3, 2, 2  # photos per person, people per split


def person(split: int, k: int) -> str:
    return f"{(split - 1) * PER_SPLIT + k + 1:03d}"


@pytest.fixture
def cfp(tmp_path: Path) -> tuple[Path, Path, dict[str, list[tuple[str, str, bool]]]]:
    """The dataset, its aligned faces, and per protocol the pairs of splits 6-10 as (face1, face2, same)."""
    root, faces = tmp_path / "cfp-dataset", tmp_path / "faces"
    lists: dict[str, list[str]] = {"frontal": [], "profile": []}
    seed = 0
    for split in range(1, 11):
        for k in range(PER_SPLIT):
            who = person(split, k)
            for pose, count in (("frontal", FRONTAL), ("profile", PROFILE)):
                for n in range(1, count + 1):
                    seed += 1
                    relative = f"{who}/{pose}/{n:02d}.jpg"
                    for folder, size in ((root / "Data" / "Images", 150), (faces, 112)):
                        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                        (folder / relative).write_bytes(smooth_jpeg(seed, size))
                    lists[pose].append(relative)
    protocol = root / "Protocol"
    protocol.mkdir()
    for pose, name in (("frontal", "F"), ("profile", "P")):
        (protocol / f"Pair_list_{name}.txt").write_text(
            "".join(f"{i} ../Data/Images/{p}\n" for i, p in enumerate(lists[pose], 1)))
    index = {pose: {p: i for i, p in enumerate(lists[pose], 1)} for pose in lists}
    held: dict[str, list[tuple[str, str, bool]]] = {"FP": [], "FF": []}
    for proto, second, n2 in (("FP", "profile", 1), ("FF", "frontal", 2)):
        for split in range(1, 11):
            a, b = person(split, 0), person(split, 1)
            same = [(f"{a}/frontal/01.jpg", f"{a}/{second}/{n2:02d}.jpg"),
                    (f"{b}/frontal/01.jpg", f"{b}/{second}/{n2:02d}.jpg")]
            diff = [(f"{a}/frontal/03.jpg", f"{b}/{second}/01.jpg"), (f"{b}/frontal/02.jpg", f"{a}/{second}/02.jpg")]
            folder = protocol / "Split" / proto / f"{split:02d}"
            folder.mkdir(parents=True)
            for kind, pairs in (("same", same), ("diff", diff)):
                (folder / f"{kind}.txt").write_text(
                    "".join(f"{index['frontal'][x]},{index[second][y]}\n" for x, y in pairs))
            if split > 5:
                held[proto] += [(x, y, True) for x, y in same] + [(x, y, False) for x, y in diff]
    return root, faces, held


def _read_bin(path: Path) -> tuple[list[bytes], list[bool]]:
    with open(path, "rb") as f:
        return pickle.load(f)


def _dealt(pairs: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    """10 same pairs and 10 different ones, dealt in turn (runs of one), file order kept within each kind."""
    same, diff = [p for p in pairs if p[2]], [p for p in pairs if not p[2]]
    return [p for k in range(10) for p in (same[k], diff[k])]


def test_split_trains_on_splits_1_to_5_and_verifies_fp_and_ff_of_6_to_10(cfp, tmp_path):
    root, faces, held = cfp
    out = tmp_path / "split"
    report = split_cfp(root, faces, out)
    train = sorted(p.name for p in (out / "train").iterdir())
    assert train == [person(s, k) for s in range(1, 6) for k in range(PER_SPLIT)], "identity-disjoint"
    assert sorted(f.name for f in (out / "train" / "001").iterdir()) == \
        ["frontal_01.jpg", "frontal_02.jpg", "frontal_03.jpg", "profile_01.jpg", "profile_02.jpg"]
    assert (out / "train" / "001" / "profile_02.jpg").read_bytes() == (faces / "001/profile/02.jpg").read_bytes()
    assert report == {"train_identities": 10, "train_images": 50, "train_people_without_images": 0,
                      "train_people_in_test_splits": 0, "cfp_fp_splits6_10_pairs": 20,
                      "cfp_fp_splits6_10_pairs_dropped": 0, "cfp_ff_splits6_10_pairs": 20,
                      "cfp_ff_splits6_10_pairs_dropped": 0}
    for proto in ("FP", "FF"):
        images, issame = _read_bin(out / f"cfp_{proto.lower()}_splits6_10.bin")
        order = _dealt(held[proto])
        assert issame == [same for _, _, same in order]
        assert images == [(faces / p).read_bytes() for x, y, _ in order for p in (x, y)]
        assert [sum(issame[2 * k:2 * k + 2]) for k in range(10)] == [1] * 10, "each protocol fold half same"


def test_two_photos_per_person_are_one_frontal_and_one_profile(cfp, tmp_path):
    root, faces, _ = cfp
    report = split_cfp(root, faces, tmp_path / "split2", train_photos=2)
    assert report["train_images"] == 20
    for who in (tmp_path / "split2" / "train").iterdir():
        assert sorted(f.name for f in who.iterdir()) == ["frontal_01.jpg", "profile_01.jpg"]


def test_missing_aligned_photo_drops_its_pair_and_says_so(cfp, tmp_path):
    root, faces, held = cfp
    missing = held["FP"][0][1]  # a profile photo of a test person, only in FP pairs
    (faces / missing).unlink()
    said: list[str] = []
    report = split_cfp(root, faces, tmp_path / "split", say=said.append)
    assert report["cfp_fp_splits6_10_pairs"] == 19 and report["cfp_fp_splits6_10_pairs_dropped"] == 1
    assert report["cfp_ff_splits6_10_pairs"] == 20
    assert any(missing in line for line in said) and any("LEFT OUT" in line for line in said)


def test_command_writes_the_split_and_refuses_every_split_held_out(cfp, tmp_path, capsys):
    root, faces, _ = cfp
    assert main([str(root), str(faces), str(tmp_path / "a"), "--test-splits", "9-10", "--train-photos", "3"]) == 0
    out = capsys.readouterr().out
    assert "train_identities=16" in out and "train_images=48" in out and "cfp_fp_splits9_10_pairs=8" in out
    assert (tmp_path / "a" / "cfp_ff_splits9_10.bin").is_file()
    assert main([str(root), str(faces), str(tmp_path / "b"), "--test-splits", "1-10"]) == 2
    assert "CFP has splits 1..10; expected some of them, not all" in capsys.readouterr().err
