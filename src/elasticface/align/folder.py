"""`elasticface-align SRC OUT`: every photo under SRC -> 112x112 faces on insightface's template under OUT, same layout.

OUT gets, beside the faces:
- `faces.csv`: one row per written face: `path` (in OUT), `source` (in SRC), `face` (0 unless --all-faces),
  `score`, `box_x1..box_y2` and `lm1_x..lm5_y` (photo pixels; score and box empty when the landmarks came
  from a file). It doubles as a landmark file for a later run.
- `align_report.csv`: one row per photo that gave no face or needs a look: `no_face`, `no_landmarks`,
  `unreadable` (with the reason), `several_faces` (one was kept by the rule), and with `fallback` (photos known
  to hold one face: a benchmark's) `fallback_forced` / `fallback_centre`: no face was found and the photo was
  kept all the same, aligned from the detector's later stages forced on it or cut as its centre crop
  (elasticface.align.fallback).

A run is resumable: photos already in faces.csv (their faces on disk) or reported without a face are skipped;
unreadable ones are tried again, and so are photos without a face when `fallback` is on. Faces are written to a
temporary name and renamed, so a killed run leaves no half-written face behind.

OUT may hold other files (it is not emptied), but a face is never written over a file that an earlier run did
not write: in an OUT without faces.csv, a photo whose face would take the name of an existing file is refused
(`OutputExists`, before anything is written) unless `overwrite`; and every face lands inside OUT.
"""

from __future__ import annotations

import csv
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
from PIL import Image

from elasticface.align.detector import Face, MTCNNDetector
from elasticface.align.fallback import CENTRE, FORCED, fallback_face
from elasticface.align.landmark_files import LANDMARK_COLUMNS, read_landmark_file
from elasticface.align.photos import DEFAULT_MAX_PIXELS, PHOTO_EXTENSIONS, BadPhotoError, read_photo
from elasticface.align.template import norm_crop
from elasticface.utils.errors import BadValue, MissingPath, OutputExists
from elasticface.utils.output_paths import atomic_path, inside

FACES_CSV = "faces.csv"
REPORT_CSV = "align_report.csv"
FACE_COLUMNS = ["path", "source", "face", "score", "box_x1", "box_y1", "box_x2", "box_y2", *LANDMARK_COLUMNS]
PICK_RULES = ("largest", "center")
_SKIP_AGAIN = ("no_face", "no_landmarks", "several_faces")  # outcomes a rerun would repeat


@dataclass
class AlignSummary:
    photos: int = 0
    done_before: int = 0
    faces: int = 0
    aligned_photos: int = 0
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (source, problem, detail) of this run

    def count(self, problem: str) -> int:
        return sum(1 for _, p, _ in self.problems if p == problem)


def list_photos(src: str, exclude: str | None = None, say: Callable[[str], None] | None = None) -> list[str]:
    """Relative paths of the JPEG/PNG files under `src`, sorted; the output folder is left out if it is inside.

    Symbolic links to folders and files are followed, as `find -L` does (a dataset is often assembled from
    links); a link back to a folder already being searched would loop, so it is named through `say` and
    skipped. A `src` without a single photo is an error that names it."""
    if not os.path.isdir(src):
        raise MissingPath(f"{src}: no such folder; expected the folder of photos to align")
    skip = os.path.realpath(exclude) if exclude else None
    found = []
    for root, dirs, files in os.walk(src, followlinks=True):
        ancestors = {os.path.realpath(root)}
        up = root
        while os.path.relpath(up, src) != ".":
            up = os.path.dirname(up)
            ancestors.add(os.path.realpath(up))
        keep = []
        for d in sorted(dirs):
            real = os.path.realpath(os.path.join(root, d))
            if real == skip:
                continue
            if real in ancestors:
                if say:
                    say(f"{os.path.join(root, d)}: a link back to {real}, which is already being searched; skipped")
                continue
            keep.append(d)
        dirs[:] = keep
        for name in files:
            if name.lower().endswith(PHOTO_EXTENSIONS):
                found.append(os.path.relpath(os.path.join(root, name), src))
    if not found:
        raise BadValue(f"source folder {src} holds no JPEG/PNG photo (searched with its sub-folders and links); "
                         f"expected photos such as {os.path.join(src, 'name', 'photo.jpg')}")
    return sorted(found)


def pick_face(faces: Sequence[Face], photo_size: tuple[int, int], rule: str = "largest") -> Face:
    """The one face kept per photo: the largest box, or the box whose centre is nearest the photo's centre
    (`photo_size` is (width, height)); ties go to the higher detection score."""
    if rule == "largest":
        return max(faces, key=lambda f: (f.area, f.score))
    if rule == "center":
        cx, cy = photo_size[0] / 2, photo_size[1] / 2

        def distance(f: Face) -> tuple[float, float]:
            return (float(np.hypot((f.box[0] + f.box[2]) / 2 - cx, (f.box[1] + f.box[3]) / 2 - cy)), -f.score)

        return min(faces, key=distance)
    raise BadValue(f"unknown pick rule {rule!r}; expected one of {PICK_RULES}")


def output_name(source: str, index: int | None) -> str:
    """The face's path in OUT: the photo's own relative path, with `_<index>` before the extension for
    --all-faces."""
    if index is None:
        return source
    stem, ext = os.path.splitext(source)
    return f"{stem}_{index}{ext}"


def _save(face: Image.Image, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    ext = os.path.splitext(path)[1].lower()
    tmp = f"{path}.part{ext}"
    if ext == ".png":
        face.save(tmp, format="PNG")
    else:
        face.save(tmp, format="JPEG", quality=95)
    os.replace(tmp, path)


def _read_rows(path: str) -> list[dict[str, str]]:
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def align_folder(
    src: str,
    out: str,
    detector: MTCNNDetector | Callable[[], MTCNNDetector] | None = None,
    landmarks_file: str | None = None,
    all_faces: bool = False,
    pick: str = "largest",
    batch_size: int = 8,
    image_size: int = 112,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    progress: bool = True,
    say: Callable[[str], None] | None = None,
    fallback: bool = False,
    overwrite: bool = False,
) -> AlignSummary:
    """Align every photo under `src` into `out` (see the module docstring). `detector`: an MTCNNDetector, a
    function making one (called only if a photo needs detecting), or None for the CPU default. `fallback`: every
    photo holds a face (a benchmark set), so one where none is found is kept (elasticface.align.fallback).
    `overwrite`: write faces over files of an OUT that no earlier run wrote (default: refuse)."""
    if pick not in PICK_RULES:
        raise BadValue(f"unknown pick rule {pick!r}; expected one of {PICK_RULES}")
    from tqdm import tqdm

    say = say or (lambda msg: tqdm.write(msg, file=sys.stderr))
    photos = list_photos(src, exclude=out, say=say)
    faces_csv, report_csv = os.path.join(out, FACES_CSV), os.path.join(out, REPORT_CSV)
    if not overwrite and not os.path.isfile(faces_csv):
        _refuse_taken_names(out, photos, all_faces)
    os.makedirs(out, exist_ok=True)
    old_faces = [r for r in _read_rows(faces_csv) if os.path.isfile(os.path.join(out, r["path"]))]
    old_report = _read_rows(report_csv)
    aligned_before = {r["source"] for r in old_faces}
    retry = ("no_landmarks",) if fallback else ("no_face", "no_landmarks")
    done = aligned_before | {r["source"] for r in old_report if r["problem"] in retry}
    kept_report = [r for r in old_report if r["source"] in done]
    given = read_landmark_file(landmarks_file, photos) if landmarks_file else None
    summary = AlignSummary(photos=len(photos), done_before=sum(1 for p in photos if p in done))
    todo = [p for p in photos if p not in done]

    bar = tqdm(total=len(todo), unit="photo", desc="align", disable=not progress, file=sys.stderr)

    def problem(source: str, kind: str, detail: str) -> None:
        summary.problems.append((source, kind, detail))
        say(f"{os.path.join(src, source)}: {detail}")

    with open(faces_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, FACE_COLUMNS)
        writer.writeheader()
        writer.writerows({k: r.get(k, "") for k in FACE_COLUMNS} for r in old_faces)
        f.flush()
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            loaded: list[tuple[str, np.ndarray]] = []
            for source in batch:
                try:
                    loaded.append((source, read_photo(os.path.join(src, source), max_pixels)))
                except BadPhotoError as exc:
                    summary.problems.append((source, "unreadable", str(exc)))
                    say(str(exc))
            if given is not None:
                found: Iterable[list[Face] | None] = [
                    [Face(np.full(4, np.nan), float("nan"), given[s])] if s in given else None for s, _ in loaded]
            elif loaded:
                if not isinstance(detector, MTCNNDetector):  # built on the first photo that needs it
                    detector = detector() if callable(detector) else MTCNNDetector()
                found = detector.detect([photo for _, photo in loaded])
            else:
                found = []
            for (source, photo), faces in zip(loaded, found):
                if faces is None:
                    problem(source, "no_landmarks", f"no landmarks for it in {landmarks_file}")
                    continue
                if not faces and fallback:
                    kept = fallback_face(detector, photo, image_size)
                    problem(source, kept.how, kept.detail())
                    faces = [kept.face]
                if not faces:
                    problem(source, "no_face", "no face found")
                    continue
                if all_faces:
                    chosen = list(enumerate(faces))
                else:
                    one = pick_face(faces, (photo.shape[1], photo.shape[0]), pick)
                    chosen = [(None, one)]
                    if len(faces) > 1:
                        problem(source, "several_faces", f"{len(faces)} faces found; kept the {pick} one "
                                                         f"(--all-faces keeps every face)")
                for index, face in chosen:
                    name = output_name(source, index)
                    _save(norm_crop(photo, face.landmarks, image_size), str(inside(out, name, src)))
                    writer.writerow(dict(zip(FACE_COLUMNS, [
                        name, source, index or 0, "" if np.isnan(face.score) else f"{face.score:.6f}",
                        *["" if np.isnan(v) else _fmt(v) for v in face.box], *map(_fmt, face.landmarks.ravel())])))
                    summary.faces += 1
                summary.aligned_photos += 1
            f.flush()
            bar.update(len(batch))
    bar.close()
    with atomic_path(report_csv) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["source", "problem", "detail"])
        writer.writerows([r["source"], r["problem"], r["detail"]] for r in kept_report)
        writer.writerows(summary.problems)
    return summary


def _refuse_taken_names(out: str, photos: Sequence[str], all_faces: bool) -> None:
    """`OutputExists` if a face would be written over a file of `out` (an OUT that no earlier run wrote)."""
    if not os.path.isdir(out):
        return
    taken = [name for name in (output_name(p, 0 if all_faces else None) for p in photos)
             if os.path.lexists(os.path.join(out, name))]
    if taken:
        raise OutputExists(f"{out}: the output folder already holds {os.path.join(out, taken[0])}"
                           f"{f' and {len(taken) - 1} more files' if len(taken) > 1 else ''} where faces would be "
                           f"written, and no {FACES_CSV} of an earlier run; choose a new folder, or pass --overwrite "
                           f"to write over them")


def format_align_summary(summary: AlignSummary, out: str) -> str:
    """The one-paragraph account the command prints."""
    def n(count: int, noun: str) -> str:
        return f"{count} {noun}{'' if count == 1 else 's'}"

    written = f"{n(summary.faces, 'face')} written from {n(summary.aligned_photos, 'photo')}"
    lines = [f"{n(summary.photos, 'photo')}: {written}"
             + (f", {summary.done_before} done by an earlier run (skipped)" if summary.done_before else "")]
    counts = {k: summary.count(k) for k in ("no_face", "no_landmarks", "unreadable", "several_faces")}
    if any(counts.values()):
        lines.append(", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items() if v)
                     + f": listed in {os.path.join(out, REPORT_CSV)}")
    forced, centre = summary.count(FORCED), summary.count(CENTRE)
    if forced or centre:
        lines.append(f"{n(forced + centre, 'photo')} without a detected face kept by --fallback ({forced} from the "
                     f"detector's later stages forced, {centre} as the centre crop): listed in "
                     f"{os.path.join(out, REPORT_CSV)}")
    lines.append(f"faces and their boxes/landmarks: {os.path.join(out, FACES_CSV)}")
    return "\n".join(lines)
