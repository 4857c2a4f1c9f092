"""LFW by its own protocol as a real-face train/test split: train on the people of folds 1-9 of `pairs.txt`,
verify on fold 10's 600 pairs (or hold out several folds: people of folds 1-5 train, folds 6-10's 3,000 pairs
verify, a benchmark five times wider).

LFW's ten folds are identity-disjoint, so a model trained on the people of nine folds is verified on faces
of people it never saw. Input: a folder of aligned 112x112 faces in LFW's layout
(`<Name>/<Name>_0001.jpg`, as `elasticface-align lfw/ faces/` writes it) and LFW's `pairs.txt` (a first
line "10 300", then per fold 300 matched lines `name n1 n2` and 300 mismatched `name1 n1 name2 n2`).
Output: `OUT/train/<Name>/...` (every image of each training person, copied) and `OUT/lfw_fold10.bin`
(the held-out fold's pairs, the aligned JPEGs stored byte for byte; `OUT/lfw_folds6_10.bin` for folds 6-10).

    elasticface-lfw-split faces/ pairs.txt lfw_split/
    python train.py experiment=lfw_fold10 data.root=lfw_split
    elasticface-lfw-split faces/ pairs.txt lfw_split_6_10/ --test-fold 6-10
    python train.py experiment=lfw_folds6_10 data.root=lfw_split_6_10
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from PIL import Image

from elasticface.data.pair_files import write_bin
from elasticface.utils.output_paths import inside, refuse_existing
from elasticface.utils.errors import BadValue, MissingPath

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


@dataclass(frozen=True)
class LfwPair:
    """One line of `pairs.txt`: image n1 of name1 and image n2 of name2 (name2 == name1 for a matched pair)."""

    name1: str
    n1: int
    name2: str
    n2: int

    @property
    def issame(self) -> bool:
        return self.name1 == self.name2

    @property
    def names(self) -> set[str]:
        return {self.name1, self.name2}


def read_lfw_pairs(path: str | Path) -> list[list[LfwPair]]:
    """The folds of an LFW `pairs.txt`: fold i is its `n` matched pairs, then its `n` mismatched pairs."""
    path = Path(path)
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    if not lines or len(lines[0]) != 2 or not all(v.isdigit() for v in lines[0]):
        raise BadValue(f"{path}: line 1 is {' '.join(lines[0]) if lines else 'missing'!r}; expected "
                         f"'<folds> <pairs per class>' as LFW's '10 300'")
    folds, per_class = int(lines[0][0]), int(lines[0][1])
    if len(lines) - 1 != folds * 2 * per_class:
        raise BadValue(f"{path}: {len(lines) - 1} pair lines; the header '{folds} {per_class}' means "
                         f"{folds * 2 * per_class} ({folds} folds x {per_class} matched + {per_class} mismatched)")
    out: list[list[LfwPair]] = []
    for fold in range(folds):
        pairs = []
        for k in range(2 * per_class):
            lineno = 2 + fold * 2 * per_class + k
            parts, matched = lines[lineno - 1], k < per_class
            expected = "name n1 n2" if matched else "name1 n1 name2 n2"
            if len(parts) != (3 if matched else 4) or not _numbers_ok(parts, matched):
                raise BadValue(f"{path}:{lineno}: {' '.join(parts)!r}; fold {fold + 1}'s "
                                 f"{'matched' if matched else 'mismatched'} pairs are lines '{expected}'")
            if matched:
                pairs.append(LfwPair(parts[0], int(parts[1]), parts[0], int(parts[2])))
            else:
                pairs.append(LfwPair(parts[0], int(parts[1]), parts[2], int(parts[3])))
        out.append(pairs)
    return out


def _numbers_ok(parts: list[str], matched: bool) -> bool:
    numbers = parts[1:] if matched else [parts[1], parts[3]]
    return all(n.isdigit() and int(n) > 0 for n in numbers)


def lfw_image(faces: Path, name: str, n: int) -> Path:
    """LFW's file name of image n of `name`: `<name>/<name>_<nnnn>.jpg`."""
    return faces / name / f"{name}_{n:04d}.jpg"


def _aligned_jpeg(path: Path, image_size: int) -> bytes:
    """The file's bytes, after checking (from the header alone, nothing decoded) that it is an aligned face."""
    with Image.open(path) as img:
        size, fmt = img.size, img.format
    if size != (image_size, image_size) or fmt != "JPEG":
        raise BadValue(f"{path}: a {size[0]}x{size[1]} {fmt}; expected a {image_size}x{image_size} aligned JPEG "
                         f"(elasticface-align writes them)")
    return path.read_bytes()


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def protocol_order(issame: Sequence[bool], num_folds: int = 10) -> list[int]:
    """The pairs of one LFW fold in the order the verification protocol needs: its 10 contiguous folds must each
    hold matched and mismatched pairs as the whole does (LFW's pairs.txt is built that way, 300 + 300 per fold).

    A fold of pairs.txt lists its matched pairs, then its mismatched ones: kept in that order, the protocol's 10
    contiguous folds of a single LFW fold are each all matched or all mismatched, every threshold is chosen on
    nine folds short of one kind, and a weak model scores below chance (raw pixels: 43%). Here the matched and
    the mismatched pairs are each cut into `num_folds` contiguous runs and dealt alternately, file order kept
    within each kind."""
    matched = [i for i, same in enumerate(issame) if same]
    mismatched = [i for i, same in enumerate(issame) if not same]

    def run(indices: list[int], k: int) -> list[int]:
        return indices[k * len(indices) // num_folds:(k + 1) * len(indices) // num_folds]

    return [i for k in range(num_folds) for i in run(matched, k) + run(mismatched, k)]


def test_set_name(test_folds: Sequence[int]) -> str:
    """The held-out pairs' set name (and .bin file stem): `lfw_fold10`, `lfw_folds6_10` for folds 6 to 10,
    `lfw_folds_1_3_5` for folds 1, 3 and 5."""
    folds = sorted(test_folds)
    if len(folds) == 1:
        return f"lfw_fold{folds[0]}"
    if folds != list(range(folds[0], folds[-1] + 1)):
        return "lfw_folds_" + "_".join(map(str, folds))
    return f"lfw_folds{folds[0]}_{folds[-1]}"


def parse_folds(text: str, option: str = "--test-fold") -> list[int]:
    """`10`, `6-10` or `1,3,5` -> the fold numbers (command-line form of `option`)."""
    try:
        folds = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            folds += list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise BadValue(f"{option}={text!r}: expected a fold (10), a range (6-10) or a list (1,3,5)") from None
    if not folds or len(set(folds)) != len(folds):
        raise BadValue(f"{option}={text!r}: expected distinct folds, at least one")
    return folds


def split_lfw(faces: str | Path, pairs_file: str | Path, out: str | Path, test_fold: int | Sequence[int] = 10,
              image_size: int = 112, say: Callable[[str], None] = _say, overwrite: bool = False,
              train_photos: int | None = None) -> dict[str, int]:
    """Write `out/train/<Name>/` (the people of every fold but the test folds) and `out/<test_set_name>.bin`
    (`lfw_fold10.bin` for fold 10; `lfw_folds6_10.bin` for folds 6-10: their pairs in one protocol order).

    The .bin's pairs are in `protocol_order`, so eval.py's 10 folds are each half matched, half mismatched.
    A training person also named in the test fold (never, in LFW's own `pairs.txt`) is left out of training
    and counted, so the split stays identity-disjoint; a training person with no folder under `faces` (the
    aligner found no face) is named through `say` and counted too. A test pair whose photo is missing is left
    out of the .bin, named and counted, and a warning says that the .bin is then not the protocol's 600 pairs.
    An `out` that holds entries is refused unless `overwrite`; a name in `pairs_file` that would put a training
    folder outside `out/train` is refused. With `train_photos`, each training person's first that many photos (by
    name) and only the people who have that many: a small set of several photos per person (docs/finetune.md).
    """
    faces, out = Path(faces), Path(out)
    if train_photos is not None and train_photos < 1:
        raise BadValue(f"--train-photos={train_photos}: expected at least 1 photo per training person")
    if not faces.is_dir():
        raise MissingPath(f"{faces}: not a folder; expected aligned faces as <Name>/<Name>_0001.jpg")
    refuse_existing(out, overwrite)
    folds = read_lfw_pairs(pairs_file)
    test_folds = [test_fold] if isinstance(test_fold, int) else sorted(test_fold)
    if not test_folds or not all(1 <= k <= len(folds) for k in test_folds) or len(test_folds) == len(folds):
        raise BadValue(f"test_fold={test_fold}: {pairs_file} has folds 1..{len(folds)}; expected some of them, "
                         "not all (the others train)")
    set_name = test_set_name(test_folds)
    held_text = f"fold {test_folds[0]}" if len(test_folds) == 1 else f"folds {','.join(map(str, test_folds))}"
    held = [i for i in range(len(folds)) if i + 1 in test_folds]
    test = [p for i in held for p in folds[i]]
    first_lines = [2 + i * len(folds[i]) + k for i in held for k in range(len(folds[i]))]  # pairs.txt's lines
    test_people = set().union(*(p.names for p in test))
    named = set().union(*(p.names for i, fold in enumerate(folds) if i not in held for p in fold))
    train_people = sorted(named - test_people)
    if not any((faces / name).is_dir() for name in sorted(named | test_people)):
        raise MissingPath(f"{faces}: not one of the {len(named | test_people)} people {pairs_file} names has a "
                                f"folder here; expected LFW's layout of aligned faces, <Name>/<Name>_0001.jpg "
                                f"(elasticface-align lfw/ faces/ writes it)")

    images, issame = [], []
    for k in protocol_order([p.issame for p in test]):
        pair = test[k]
        paths = [lfw_image(faces, pair.name1, pair.n1), lfw_image(faces, pair.name2, pair.n2)]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            say(f"{missing[0]}: missing; {held_text}'s pair on {pairs_file}:{first_lines[k]} is left out")
            continue
        images += [_aligned_jpeg(p, image_size) for p in paths]
        issame.append(pair.issame)
    dropped = len(test) - len(issame)
    if not issame:
        raise MissingPath(f"{faces}: not one of {held_text}'s {len(test)} pairs has both photos; align "
                                f"every LFW photo first (elasticface-align lfw/ faces/)")
    if dropped:
        say(f"WARNING: {dropped} of {held_text}'s {len(test)} pairs were LEFT OUT (photos missing, listed "
            f"above): {set_name}.bin holds {len(issame)} pairs, not the protocol's {len(test)}, so its "
            f"accuracy is not comparable with published LFW figures")

    def photos(name: str) -> list[Path]:
        return sorted(f for f in (faces / name).glob("*") if f.suffix.lower() in IMAGE_SUFFIXES) \
            if (faces / name).is_dir() else []

    fewer: set[str] = set()
    if train_photos is not None:
        fewer = {name for name in train_people if 0 < len(photos(name)) < train_photos}
        train_people = [name for name in train_people if name not in fewer]
    copied, missing = write_train_folder(
        out, train_people, lambda name: photos(name)[:train_photos], lambda photo: photo.name,
        lambda name: f"{faces / name}: no aligned face of {name} (a training person)", say, overwrite, str(pairs_file))
    write_bin(str(out / f"{set_name}.bin"), images, issame)
    return {"train_identities": len(train_people) - missing, "train_images": copied,
            "train_people_without_images": missing, "train_people_with_fewer_photos": len(fewer),
            "train_people_in_test_fold": len(named & test_people),
            "test_pairs": len(issame), "test_matched": sum(issame), "test_pairs_dropped": dropped}


def write_train_folder(out: Path, people: Iterable[str], photos_of: Callable[[str], list[Path]],
                       saved_as: Callable[[Path], str], no_face: Callable[[str], str],
                       say: Callable[[str], None], overwrite: bool = False,
                       source: str | None = None) -> tuple[int, int]:
    """`out/train/<person>/` with each training person's photos copied (as `saved_as` names them); a person without
    one is named (`no_face`) and left out. Returns (photos copied, people left out). An existing `out/train` is
    refused unless `overwrite`; a person's name (read from `source`) that leads out of it is refused."""
    train_root = out / "train"
    refuse_existing(train_root, overwrite)
    folders = {person: inside(train_root, person, source) for person in people}  # every name checked, then written
    copied, left_out = 0, 0
    for person, folder in folders.items():
        photos = photos_of(person)
        if not photos:
            say(f"{no_face(person)}; left out of training")
            left_out += 1
            continue
        folder.mkdir(parents=True, exist_ok=overwrite)
        for photo in photos:
            shutil.copyfile(photo, inside(folder, saved_as(photo), source))
        copied += len(photos)
    return copied, left_out
