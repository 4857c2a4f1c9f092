"""A MegaFace stand-in from any folder of aligned faces (`<person>/<file>`), in insightface's testpack layout.

MegaFace's data is no longer distributed; the protocol still runs on real photos. People with at least
`min_probe_photos` become the probes (FaceScrub's role; at most `max_probe_photos` each, the first by name),
people with a single photo the distractors (MegaFace's role: `megaface_images/<initial>/<person>/<file>`), so no
person is on both sides; the people in between go to `train/<person>/`, a training folder of people in neither
side. The noise lists name the photos where the aligner chose among several faces (its `align_report.csv`'s
`several_faces`): the stand-in's nearest thing to a mislabelled image. Files are hard links where the file system
allows, else copies. An output folder that already holds files is refused unless `overwrite` (the command's
`--overwrite`); every file lands inside it (`elasticface.utils.output_paths`).
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Callable

from elasticface.data.folder import IMAGE_EXTENSIONS
from elasticface.eval.identification.testpack import (DISTRACTOR_DIR, DISTRACTOR_LIST, DISTRACTOR_NOISES, PROBE_DIR,
                                                     PROBE_LIST, PROBE_NOISES)
from elasticface.utils.output_paths import atomic_write, inside, refuse_existing
from elasticface.utils.errors import BadValue, MissingPath

REPORT = "align_report.csv"


def people_photos(faces: str) -> dict[str, list[str]]:
    """{person: sorted image file names} of aligned faces `<person>/<file>`; people without images left out."""
    if not os.path.isdir(faces):
        raise MissingPath(f"{faces} not found; expected aligned faces as <person>/<file> (elasticface-align)")
    people = {}
    for entry in sorted(os.scandir(faces), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith("."):
            photos = sorted(f for f in os.listdir(entry.path) if f.lower().endswith(IMAGE_EXTENSIONS))
            if photos:
                people[entry.name] = photos
    if not people:
        raise BadValue(f"{faces}: no <person>/<image> folders")
    return people


def _flagged(faces: str) -> set[str]:
    """'<person>/<file>' of the photos the aligner reported with several faces."""
    path = os.path.join(faces, REPORT)
    if not os.path.isfile(path):
        return set()
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {row["source"].replace(os.sep, "/") for row in rows if row.get("problem") == "several_faces"}


def place(src: str, dst: str | os.PathLike) -> None:
    """`src` at `dst`: a hard link where the file system allows, else a copy; an existing `dst` is kept."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(dst):
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def build_megaface_pack(faces: str, out: str, min_probe_photos: int = 10, max_probe_photos: int = 40,
                        say: Callable[[str], None] = print, overwrite: bool = False) -> dict[str, int]:
    """Write the testpack (and train/) under `out`, which must be new or empty unless `overwrite`; returns the
    counts."""
    if min_probe_photos < 3:
        raise BadValue(f"min_probe_photos={min_probe_photos}: the distractors are the people with one photo and "
                         f"the training people those in between, so probes need at least 3")
    people = people_photos(faces)
    refuse_existing(out, overwrite)
    flagged = _flagged(faces)
    probes, distractors, noise_probes, noise_distractors, train = [], [], [], [], 0
    for person, photos in people.items():
        if len(photos) >= min_probe_photos:
            for photo in photos[:max_probe_photos]:
                probes.append(f"{person}/{photo}")
                place(os.path.join(faces, person, photo), inside(out, os.path.join(PROBE_DIR, person, photo)))
                if f"{person}/{photo}" in flagged:
                    noise_probes.append(photo)
        elif len(photos) == 1:
            name = f"{person[0]}/{person}/{photos[0]}"
            distractors.append(name)
            place(os.path.join(faces, person, photos[0]), inside(out, os.path.join(DISTRACTOR_DIR, name)))
            if f"{person}/{photos[0]}" in flagged:
                noise_distractors.append(name)
        else:
            for photo in photos:
                place(os.path.join(faces, person, photo), inside(out, os.path.join("train", person, photo)))
            train += len(photos)
    for name, lines in ((PROBE_LIST, probes), (DISTRACTOR_LIST, distractors),
                        (PROBE_NOISES, ["# photos the aligner chose among several faces in", *noise_probes]),
                        (DISTRACTOR_NOISES, ["# photos the aligner chose among several faces in",
                                             *noise_distractors])):
        atomic_write(os.path.join(out, name), "".join(f"{line}\n" for line in lines))
    counts = {"probe_people": len({p.split("/")[0] for p in probes}), "probes": len(probes),
              "distractors": len(distractors), "probe_noises": len(noise_probes),
              "distractor_noises": len(noise_distractors),
              "train_people": sum(1 for p in people.values() if 1 < len(p) < min_probe_photos), "train_photos": train}
    if not probes or not distractors:
        say(f"warning: {out} has {len(probes)} probes and {len(distractors)} distractors; both are needed")
    return counts
