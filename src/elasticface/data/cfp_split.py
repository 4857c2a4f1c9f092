"""CFP by its own protocol as an identity-disjoint fine-tuning benchmark: train on the people of some of its
ten splits, verify frontal-profile (CFP-FP) and frontal-frontal (CFP-FF) pairs of the others.

CFP (Sengupta et al., "Frontal to Profile Face Verification in the Wild", 2016) holds 10 frontal and 4 profile
photos of each of 500 people; each of its ten splits (`Protocol/Split/FP/01..10`, and `FF` with the same
people) pairs photos of 50 people no other split names. Profile faces are where a model trained on mostly
frontal faces (MS1M) has room to learn: insightface's MobileFaceNet y1 scores 99.50 on LFW but 88.94 on CFP-FP.

Input: the dataset folder (`Protocol/`, `Data/Images/<id>/frontal|profile/NN.jpg`) and its photos aligned in
the same layout (`elasticface-align cfp-dataset/Data/Images faces/ --fallback`). Output: `OUT/train/<id>/`
(the aligned photos of each training person, as `frontal_NN.jpg` and `profile_NN.jpg`) and
`OUT/cfp_fp_splits6_10.bin`, `OUT/cfp_ff_splits6_10.bin` (the held-out splits' pairs, aligned JPEGs byte for
byte, in an order whose 10 contiguous folds each hold the same number of same and different pairs).

    elasticface-cfp-split cfp-dataset faces/ cfp_split/
    elasticface-cfp-split cfp-dataset faces/ cfp_split_2/ --train-photos 2    # 2 photos per training person
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Sequence

from elasticface.data.lfw_split import _aligned_jpeg, protocol_order, write_train_folder
from elasticface.data.pair_files import write_bin
from elasticface.data.pair_lists import cfp_folds
from elasticface.utils.output_paths import refuse_existing
from elasticface.utils.errors import BadValue, MissingPath

PROTOCOLS = ("FP", "FF")


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def test_set_name(protocol: str, splits: Sequence[int]) -> str:
    """`cfp_fp_splits6_10` for CFP-FP's splits 6 to 10, `cfp_ff_split10`, `cfp_fp_splits_1_3_5`."""
    splits = sorted(splits)
    stem = f"cfp_{protocol.lower()}_"
    if len(splits) == 1:
        return f"{stem}split{splits[0]}"
    if splits != list(range(splits[0], splits[-1] + 1)):
        return f"{stem}splits_" + "_".join(map(str, splits))
    return f"{stem}splits{splits[0]}_{splits[-1]}"


def photo_order(photos: Sequence[Path]) -> list[Path]:
    """A person's photos in the order `--train-photos N` takes them: frontal 1, profile 1, frontal 2, profile 2,
    ... then the remaining frontal ones, so that 2 photos are one of each pose (the pose gap the set measures)."""
    frontal = sorted(p for p in photos if p.parent.name == "frontal")
    profile = sorted(p for p in photos if p.parent.name == "profile")
    interleaved = [p for pair in zip(frontal, profile) for p in pair]
    shorter = min(len(frontal), len(profile))
    return interleaved + frontal[shorter:] + profile[shorter:]


def split_cfp(cfp_dir: str | Path, faces: str | Path, out: str | Path, test_splits: Sequence[int] = range(6, 11),
              train_photos: int | None = None, image_size: int = 112,
              say: Callable[[str], None] = _say, overwrite: bool = False) -> dict[str, int]:
    """Write `out/train/<id>/` (people of the splits not in `test_splits`; with `train_photos`, at most that many
    photos each, `photo_order`'s first) and one .bin per protocol with the test splits' pairs.

    The people of each split are read off the protocol's own photo lists, so the split is identity-disjoint by
    construction; a training person also named by a test split is left out and counted. A test pair whose aligned
    photo is missing is left out, named and counted (then the .bin is not the protocol's pairs), as is a training
    photo without an aligned face. An `out` that holds entries is refused unless `overwrite`; a person named by
    the protocol whose folder would land outside `out/train` is refused.
    """
    cfp_dir, faces, out = Path(cfp_dir), Path(faces), Path(out)
    images_dir = cfp_dir / "Data" / "Images"
    for needed in (images_dir, *(cfp_dir / "Protocol" / "Split" / p for p in PROTOCOLS)):
        if not needed.is_dir():
            raise MissingPath(f"{needed}: not a folder; expected CFP's dataset folder (Protocol/Split/FP, "
                                    f"Protocol/Split/FF, Data/Images)")
    if not faces.is_dir():
        raise MissingPath(f"{faces}: not a folder; expected CFP's photos aligned in Data/Images' layout "
                                f"(elasticface-align {images_dir} {faces} --fallback)")
    if train_photos is not None and train_photos < 1:
        raise BadValue(f"--train-photos={train_photos}: expected at least 1 photo per training person")
    refuse_existing(out, overwrite)

    folds: dict[str, list[list[tuple[str, str, bool]]]] = {}
    for protocol in PROTOCOLS:
        lost: list[str] = []
        folds[protocol] = cfp_folds(str(cfp_dir / "Protocol" / "Split" / protocol), str(images_dir), lost)
        if lost:
            raise MissingPath(f"{lost[0]}: the dataset's own photo is missing (is {cfp_dir} complete?)")
    count = len(folds["FP"])
    test = sorted(set(test_splits))
    if not test or not all(1 <= k <= count for k in test) or len(test) == count:
        raise BadValue(f"test splits {list(test_splits)}: CFP has splits 1..{count}; expected some of them, not all "
                         f"(the others train)")

    def person(path: str) -> str:
        return Path(path).relative_to(images_dir).parts[0]

    def people(protocol: str, splits: Sequence[int]) -> set[str]:
        return {person(p) for k in splits for a, b, _ in folds[protocol][k - 1] for p in (a, b)}

    train_splits = [k for k in range(1, count + 1) if k not in test]
    test_people = set().union(*(people(p, test) for p in PROTOCOLS))
    named = set().union(*(people(p, train_splits) for p in PROTOCOLS))
    train_people = sorted(named - test_people)

    report: dict[str, int] = {}
    bins: dict[str, tuple[list[bytes], list[bool]]] = {}
    for protocol in PROTOCOLS:
        name = test_set_name(protocol, test)
        pairs = [pair for k in test for pair in folds[protocol][k - 1]]
        images, issame = [], []
        for i in protocol_order([same for _, _, same in pairs]):
            aligned = [faces / Path(p).relative_to(images_dir) for p in pairs[i][:2]]
            missing = [p for p in aligned if not p.is_file()]
            if missing:
                say(f"{missing[0]}: missing (no aligned face); {name}'s pair of {pairs[i][0]} and {pairs[i][1]} is "
                    f"left out")
                continue
            images += [_aligned_jpeg(p, image_size) for p in aligned]
            issame.append(pairs[i][2])
        if not issame:
            raise MissingPath(f"{faces}: not one of {name}'s {len(pairs)} pairs has both aligned photos; align "
                                    f"CFP's photos first (elasticface-align {images_dir} {faces} --fallback)")
        dropped = len(pairs) - len(issame)
        if dropped:
            say(f"WARNING: {dropped} of {name}'s {len(pairs)} pairs were LEFT OUT (aligned photos missing, listed "
                f"above): {name}.bin holds {len(issame)} pairs, not the protocol's {len(pairs)}")
        bins[name] = images, issame
        report[f"{name}_pairs"] = len(issame)
        report[f"{name}_pairs_dropped"] = dropped

    copied, without = write_train_folder(
        out, train_people, lambda who: photo_order(list((faces / who).glob("*/*.jpg")))[:train_photos],
        lambda photo: f"{photo.parent.name}_{photo.name}",
        lambda who: f"{faces / who}: no aligned face of training person {who}", say, overwrite,
        str(cfp_dir / "Protocol"))
    for name, (images, issame) in bins.items():
        write_bin(str(out / f"{name}.bin"), images, issame)
    return {"train_identities": len(train_people) - without, "train_images": copied,
            "train_people_without_images": without, "train_people_in_test_splits": len(named & test_people),
            **report}
