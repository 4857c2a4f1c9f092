"""The LFW split (train on the people of folds 1-9, verify on fold 10's pairs) on a synthetic LFW-layout folder.

The folder and pairs.txt are written here in LFW's own formats: `<Name>/<Name>_0001.jpg`, a "10 300" header,
per fold 300 matched lines `name n1 n2` then 300 mismatched `name1 n1 name2 n2`. The expected split is
derived from what the test wrote, not from the code under test.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from helpers.exit_status import exit_status
from hydra.utils import instantiate

from elasticface.cli.lfw_split import main
from elasticface.data.lfw_split import read_lfw_pairs, split_lfw
from helpers.images import smooth_jpeg
from conftest import compose_train

PEOPLE_PER_FOLD, IMAGES = 3, 3
# fold 10's 300 matched (0-299) and 300 mismatched (300-599) pairs as the .bin holds them: runs of 30 in turn, so
# that each of the verification protocol's 10 contiguous folds is half matched (LFW's own folds are 300 + 300)
PROTOCOL_ORDER = [i for k in range(10) for i in [*range(30 * k, 30 * k + 30), *range(300 + 30 * k, 330 + 30 * k)]]


def person(fold: int, k: int) -> str:
    return f"Person_F{fold}_{k}"


@pytest.fixture
def lfw(tmp_path: Path) -> tuple[Path, Path, list[tuple[str, str, bool]]]:
    """Aligned faces, pairs.txt, and fold 10's pairs as (file1, file2, same) in pairs.txt order."""
    faces = tmp_path / "faces"
    seed = 0
    for fold in range(1, 11):
        for k in range(PEOPLE_PER_FOLD):
            name = person(fold, k)
            (faces / name).mkdir(parents=True)
            for n in range(1, IMAGES + 1):
                seed += 1
                (faces / name / f"{name}_{n:04d}.jpg").write_bytes(smooth_jpeg(seed))
    lines, fold10 = ["10\t300"], []
    for fold in range(1, 11):
        for i in range(300):  # matched: name n1 n2
            name, n1, n2 = person(fold, i % PEOPLE_PER_FOLD), 1 + i % 2, 3
            lines.append(f"{name}\t{n1}\t{n2}")
            fold10 += [(f"{name}/{name}_{n1:04d}.jpg", f"{name}/{name}_{n2:04d}.jpg", True)] if fold == 10 else []
        for i in range(300):  # mismatched: name1 n1 name2 n2
            a, b = person(fold, i % PEOPLE_PER_FOLD), person(fold, (i + 1) % PEOPLE_PER_FOLD)
            lines.append(f"{a}\t2\t{b}\t{1 + i % 3}")
            fold10 += [(f"{a}/{a}_0002.jpg", f"{b}/{b}_{1 + i % 3:04d}.jpg", False)] if fold == 10 else []
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("\n".join(lines) + "\n")
    return faces, pairs, fold10


def test_split_trains_on_folds_1_to_9_and_verifies_on_fold_10s_600_pairs(lfw, tmp_path):
    faces, pairs, fold10 = lfw
    (faces / person(2, 0) / "Person_F2_0_0099.jpg").write_bytes(smooth_jpeg(999))  # in no pair: still a training image
    out = tmp_path / "split"
    report = split_lfw(faces, pairs, out)

    train_people = sorted(p.name for p in (out / "train").iterdir())
    assert train_people == sorted(person(f, k) for f in range(1, 10) for k in range(PEOPLE_PER_FOLD))
    assert not any(name.startswith("Person_F10_") for name in train_people), "identity-disjoint"
    assert (out / "train" / person(2, 0) / "Person_F2_0_0099.jpg").read_bytes() == smooth_jpeg(999)
    assert report == {"train_identities": 27, "train_images": 27 * IMAGES + 1, "train_people_without_images": 0,
                      "train_people_with_fewer_photos": 0, "train_people_in_test_fold": 0, "test_pairs": 600,
                      "test_matched": 300,
                      "test_pairs_dropped": 0}

    with open(out / "lfw_fold10.bin", "rb") as f:
        bins, issame = pickle.load(f)
    order = [fold10[i] for i in PROTOCOL_ORDER]
    assert issame == [same for _, _, same in order] and len(issame) == 600
    expected = [(faces / p).read_bytes() for a, b, _ in order for p in (a, b)]
    assert bins == expected, "fold 10's aligned JPEGs, byte for byte, matched and mismatched runs of 30 dealt in turn"
    # the protocol's 10 contiguous folds (60 pairs each) are each half matched, as LFW's own folds are
    assert [sum(issame[60 * k:60 * (k + 1)]) for k in range(10)] == [30] * 10


def test_train_photos_keeps_the_first_n_of_each_person_who_has_n(lfw, tmp_path, capsys):
    """`--train-photos 2`: each training person's first two photos by name, and only the people who have two (the
    small domains of docs/finetune.md); the test pairs are those of the split without it."""
    from elasticface.cli.lfw_split import main

    faces, pairs, _ = lfw
    for name in (person(1, 0), person(2, 1)):  # two training people left with one photo
        for n in (2, 3):
            (faces / name / f"{name}_{n:04d}.jpg").unlink()
    assert main([str(faces), str(pairs), str(tmp_path / "two"), "--train-photos", "2"]) == 0
    assert "train_identities=25 train_images=50 train_people_without_images=0 train_people_with_fewer_photos=2 " \
        in capsys.readouterr().out
    train = tmp_path / "two" / "train"
    assert not (train / person(1, 0)).exists() and not (train / person(2, 1)).exists()
    for folder in train.iterdir():
        assert sorted(p.name for p in folder.iterdir()) == [f"{folder.name}_0001.jpg", f"{folder.name}_0002.jpg"]
    split_lfw(faces, pairs, tmp_path / "all")
    assert (tmp_path / "two" / "lfw_fold10.bin").read_bytes() == (tmp_path / "all" / "lfw_fold10.bin").read_bytes()
    assert main([str(faces), str(pairs), str(tmp_path / "none"), "--train-photos", "0"]) == 2
    assert "--train-photos=0: expected at least 1 photo per training person" in capsys.readouterr().err


def test_the_experiment_trains_on_the_split_and_verifies_on_fold_10(lfw, tmp_path, capsys):
    faces, pairs, _ = lfw
    assert main([str(faces), str(pairs), str(tmp_path / "split")]) == 0
    printed = capsys.readouterr().out.splitlines()[-1]  # "train: python train.py experiment=... data.root=..."
    assert printed == f"train: python train.py experiment=lfw_fold10 data.root={tmp_path / 'split'}"
    cfg = compose_train(printed.split()[3:], tmp_path)  # the overrides the command printed, as printed
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    assert datamodule.num_classes == 27
    assert list(datamodule.val_sets) == ["lfw_fold10"] and datamodule.val_sets["lfw_fold10"].num_pairs == 600


def test_a_person_in_the_test_fold_never_trains(lfw, tmp_path):
    faces, pairs, _ = lfw
    text = pairs.read_text().splitlines()
    shared = person(10, 0)
    text[1] = f"{shared}\t1\t2"  # fold 1's first matched pair names a fold-10 person
    pairs.write_text("\n".join(text) + "\n")
    report = split_lfw(faces, pairs, tmp_path / "split")
    assert not (tmp_path / "split" / "train" / shared).exists()
    assert report["train_people_in_test_fold"] == 1


@pytest.mark.parametrize("edit, message", [
    (lambda lines: ["10 300 x"] + lines[1:], r"pairs.txt: line 1 .*expected '<folds> <pairs per class>'"),
    (lambda lines: lines[:-1], r"pairs.txt: 5999 pair lines; the header '10 300' means 6000"),
    (lambda lines: lines[:2] + ["Someone\t1"] + lines[3:], r"pairs.txt:3: 'Someone 1'; fold 1's matched pairs"),
    (lambda lines: lines[:302] + ["A\t1\tB\tx"] + lines[303:], r"pairs.txt:303: .*fold 1's mismatched pairs"),
])
def test_bad_pairs_txt_names_the_file_and_line(lfw, edit, message):
    _, pairs, _ = lfw
    pairs.write_text("\n".join(edit(pairs.read_text().splitlines())) + "\n")
    with pytest.raises(ValueError, match=message):
        read_lfw_pairs(pairs)


def test_an_unaligned_test_image_is_refused_naming_it(lfw, tmp_path):
    faces, pairs, fold10 = lfw
    first = faces / fold10[0][0]
    first.write_bytes(smooth_jpeg(1, size=250))  # an unaligned LFW photo is 250x250
    with pytest.raises(ValueError, match=rf"{first.name}: a 250x250 JPEG; expected a 112x112 aligned JPEG"):
        split_lfw(faces, pairs, tmp_path / "a")


def test_missing_photos_are_named_counted_and_the_split_goes_on(lfw, tmp_path, capsys):
    """A fold-10 pair without its photo leaves the .bin (named, counted, and a loud warning: fewer pairs is not
    the protocol); a training person without faces leaves training (named, counted)."""
    faces, pairs, fold10 = lfw
    gone = faces / fold10[0][0]  # Person_F10_0_0001.jpg: fold 10's matched pairs 1 and 4 (i % 3 == 0, i % 2 == 0)
    gone.unlink()
    shutil.rmtree(faces / person(3, 1))
    assert main([str(faces), str(pairs), str(tmp_path / "split")]) == 0
    captured = capsys.readouterr()
    lost = [i for i, (a, b, _) in enumerate(fold10) if fold10[0][0] in (a, b)]
    lines = captured.err.splitlines()
    assert lines[:len(lost)] == [f"{gone}: missing; fold 10's pair on {pairs}:{5402 + i} is left out" for i in lost]
    assert f"WARNING: {len(lost)} of fold 10's 600 pairs were LEFT OUT" in captured.err
    assert f"{faces / person(3, 1)}: no aligned face of {person(3, 1)} (a training person)" in captured.err
    assert (f"train_identities=26 train_images={26 * IMAGES} train_people_without_images=1 "
            f"train_people_with_fewer_photos=0 train_people_in_test_fold=0 test_pairs={600 - len(lost)}") \
        in captured.out
    assert f"test_pairs_dropped={len(lost)}" in captured.out
    with open(tmp_path / "split" / "lfw_fold10.bin", "rb") as f:
        bins, issame = pickle.load(f)
    kept = [fold10[i] for i in PROTOCOL_ORDER if i not in lost]
    assert issame == [same for _, _, same in kept]
    assert bins == [(faces / p).read_bytes() for a, b, _ in kept for p in (a, b)]


def test_a_folder_without_the_lfw_layout_is_an_error_naming_it(lfw, tmp_path):
    _, pairs, _ = lfw
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "Person_F10_0_0001.jpg").write_bytes(smooth_jpeg(1))  # photos, but not in <Name>/ folders
    with pytest.raises(FileNotFoundError, match=rf"{flat}: not one of the 30 people .*pairs.txt names has a folder"):
        split_lfw(flat, pairs, tmp_path / "split")


@pytest.mark.slow
def test_y1_fine_tune_scores_the_released_weights_before_its_first_step(lfw, tmp_path):
    """experiment=lfw_y1_finetune on a split, from a y1-layout MXNet file (random weights written by MXNet 1.9.1):
    the run's baseline/start_acc is what eval.py scores for the same file on the same fold-10 .bin."""
    from conftest import ROOT, compose_eval

    from elasticface.eval.run import evaluate
    from elasticface.training import run

    faces, pairs, _ = lfw
    assert main([str(faces), str(pairs), str(tmp_path / "split")]) == 0
    y1 = ROOT / "tests" / "data" / "mxnet" / "y1" / "model-0000.params"  # eval writes nothing beside it
    summary = run(compose_train(["experiment=lfw_y1_finetune", f"data.root={tmp_path / 'split'}", f"weights={y1}",
                                 "trainer.max_epochs=1", "logger=[]", "data.num_workers=0", "model.compile=false"],
                                tmp_path / "run"))
    assert summary["backbone"] == "mobilefacenet_y1" and summary["head"] == "elastic_arc"
    assert summary["weights"]["layout"].endswith("128-d embedding") and summary["global_step"] == 1
    rows = evaluate(compose_eval([f"weights={y1}", f"data.val_root={tmp_path / 'split'}", "data.val_sets=[lfw_fold10]",
                                  "device=cpu", "num_workers=0", "plots=false"]), output_dir=str(tmp_path / "eval"))
    assert summary["baseline/start_acc_per_set"] == {"lfw_fold10": rows[0]["acc"]}


def test_folds_6_to_10_held_out_give_the_wide_benchmark(lfw, tmp_path, capsys):
    """`--test-fold 6-10`: the people of folds 1-5 train, folds 6-10's 3,000 pairs verify, in one protocol order
    (each of eval's 10 contiguous folds half matched), for experiment=lfw_folds6_10."""
    faces, pairs, _ = lfw
    out = tmp_path / "wide"
    assert main([str(faces), str(pairs), str(out), "--test-fold", "6-10"]) == 0
    printed = capsys.readouterr().out
    assert "test_pairs=3000 test_matched=1500 test_pairs_dropped=0" in printed
    assert f"train: python train.py experiment=lfw_folds6_10 data.root={out}" in printed
    assert sorted(p.name for p in (out / "train").iterdir()) == sorted(
        person(f, k) for f in range(1, 6) for k in range(PEOPLE_PER_FOLD))
    with open(out / "lfw_folds6_10.bin", "rb") as f:
        bins, issame = pickle.load(f)
    assert len(bins) == 6000 and [sum(issame[300 * k:300 * (k + 1)]) for k in range(10)] == [150] * 10
    # the matched pairs in pairs.txt order: fold 6's first (Person_F6_0's images 1 and 3) opens the .bin
    assert bins[0] == (faces / person(6, 0) / f"{person(6, 0)}_0001.jpg").read_bytes()
    cfg = compose_train(["experiment=lfw_folds6_10", f"data.root={out}"], tmp_path / "run")
    assert list(cfg.data.val_sets.names) == ["lfw_folds6_10"] and cfg.trainer.max_epochs == 8


@pytest.mark.parametrize("value", ["6-x", "1-10", "3,3", "0"])
def test_bad_test_folds_are_named(lfw, tmp_path, value, capsys):
    faces, pairs, _ = lfw
    capsys.readouterr()
    assert exit_status(main, [str(faces), str(pairs), str(tmp_path / "bad"), "--test-fold", value]) == 2
    said = capsys.readouterr().err
    assert "--test-fold" in said or "test_fold=" in said, said
