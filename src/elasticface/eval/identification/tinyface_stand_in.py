"""A TinyFace stand-in from any folder of aligned faces (`<person>/<file>`), in TinyFace's test layout.

TinyFace's test split is low-resolution faces of 2,569 people, 1-2 probes and 1-2 gallery images each, among 153,428
faces of no one. Its images are not the project's to ship; the protocol still runs on public photos, made low
resolution first (`elasticface-convert lowres`): people with one photo become the distractors, people with several
alternate by name between the test (`Probe/` and `Gallery_Match/`, their photos alternating by name, at most
`max_photos` each, the first by name) and `train/<person>/` (all their photos: people the test never sees, for a
fine-tune). Test faces are named as TinyFace names them, `<identity>_<n>.jpg`, the identity a number;
`identities.csv` maps each number to its person. The split depends on names only, so the same photos at another
resolution (the sharp ones beside) split the same way. Files are hard links where the file system allows.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from elasticface.eval.identification.stand_in import people_photos, place
from elasticface.eval.identification.tinyface import DISTRACTOR_DIR, MATCH_DIR, PROBE_DIR
from elasticface.utils.errors import BadValue
from elasticface.utils.output_paths import atomic_write, inside, refuse_existing

IDENTITIES = "identities.csv"


def build_tinyface_pack(faces: str, out: str, max_photos: int = 10, overwrite: bool = False,
                        say: Callable[[str], None] = print) -> dict[str, int]:
    """Write the test split (and train/) under `out`, which must be new or empty unless `overwrite`; returns the
    counts."""
    if max_photos < 2:
        raise BadValue(f"max_photos={max_photos}: a test person needs a probe and a gallery image, so at least 2")
    people = people_photos(faces)
    refuse_existing(out, overwrite)
    train = set([p for p, photos in people.items() if len(photos) > 1][1::2])  # every other person by name
    counts = dict.fromkeys(("test_people", "probes", "gallery_matches", "distractors", "train_people",
                            "train_photos"), 0)
    identities = ["identity,person"]
    for person, photos in people.items():
        if len(photos) == 1:
            place(os.path.join(faces, person, photos[0]), inside(out, os.path.join(DISTRACTOR_DIR, photos[0])))
            counts["distractors"] += 1
        elif person in train:
            for photo in photos:
                place(os.path.join(faces, person, photo), inside(out, os.path.join("train", person, photo)))
            counts["train_people"] += 1
            counts["train_photos"] += len(photos)
        else:
            counts["test_people"] += 1
            number = counts["test_people"]
            identities.append(f"{number},{person}")
            for n, photo in enumerate(photos[:max_photos], start=1):
                folder, key = (MATCH_DIR, "gallery_matches") if n % 2 == 1 else (PROBE_DIR, "probes")
                name = f"{number}_{n}{os.path.splitext(photo)[1].lower()}"
                place(os.path.join(faces, person, photo), inside(out, os.path.join(folder, name)))
                counts[key] += 1
    atomic_write(os.path.join(out, IDENTITIES), "".join(f"{line}\n" for line in identities))
    if not counts["probes"] or not counts["distractors"]:
        say(f"warning: {out} has {counts['probes']} probes and {counts['distractors']} distractors; both are needed")
    return counts
