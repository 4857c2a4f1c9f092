"""What a path a key names must hold, checked in milliseconds before any model is built or data set scanned.

Each check looks at names and first bytes only (the readers parse the contents later, and fail on a corrupt file
naming it); together they catch the first-day mistakes: the wrong folder, the parent of the right one, a file
where a folder is needed, a text file given as a model. Each takes the key and the path and raises the project's
user errors (utils/errors.py). The table of which key needs which layout: cli/config_rules.py.
"""

from __future__ import annotations

import os

from elasticface.utils.errors import BadFile, MissingPath
from elasticface.utils.model_files import MODEL_FORMATS, model_file_kind

#: the first bytes of a pickle of protocol 2 and later (insightface's .bin sets); older ones start with "("
PICKLE_STARTS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05", b"(")
#: image files an image folder holds
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
#: person folders looked into for an image
PEOPLE_LOOKED_AT = 20


def _folder(key: str, path: str, what: str) -> list[str]:
    if not os.path.isdir(path):
        raise BadFile(f"{key}={path}: a file, not a folder; expected {what}")
    return sorted(os.listdir(path))


def folder(key: str, path: str) -> None:
    _folder(key, path, "a folder")


def recordio_root(key: str, path: str) -> None:
    """insightface's RecordIO folder: train.rec and train.idx (property beside them, or the header record)."""
    names = _folder(key, path, "insightface's RecordIO folder (train.rec, train.idx, property)")
    missing = [n for n in ("train.rec", "train.idx") if n not in names]
    if missing:
        below = [d for d in names if os.path.isfile(os.path.join(path, d, "train.rec"))]
        hint = f"; {os.path.join(path, below[0])} has them" if below else ""
        raise MissingPath(f"{key}={path}: no {' and no '.join(missing)} in this folder{hint}; expected insightface's "
                          f"RecordIO folder (train.rec, train.idx, property), e.g. faces_emore/")


def image_folder(key: str, path: str) -> None:
    """A folder of people: <person>/<image>."""
    names = _folder(key, path, "a folder of people, <person>/<image>")
    people = [n for n in names if os.path.isdir(os.path.join(path, n))]
    if not people:
        loose = [n for n in names if n.lower().endswith(IMAGE_SUFFIXES)]
        found = f"{len(loose)} images and no person folders" if loose else "no person folders"
        raise BadFile(f"{key}={path}: {found}; expected one folder per person, <person>/<image> (the layout "
                      f"elasticface-align writes)")
    for person in people[:PEOPLE_LOOKED_AT]:  # the first people show whether the folder is what it should be
        with os.scandir(os.path.join(path, person)) as entries:
            if any(e.name.lower().endswith(IMAGE_SUFFIXES) for e in entries):
                return
    raise BadFile(f"{key}={path}: {len(people)} folders, and no image in the first {min(len(people), PEOPLE_LOOKED_AT)}"
                  f"; expected one folder of images per person, <person>/<image> ({', '.join(IMAGE_SUFFIXES)})")


def bin_sets_root(key: str, path: str) -> None:
    """A folder holding insightface's .bin verification sets (lfw.bin, cfp_fp.bin, ...), each starting as a pickle."""
    names = _folder(key, path, "a folder of insightface .bin sets (lfw.bin, cfp_fp.bin, agedb_30.bin)")
    sets = [n for n in names if n.endswith(".bin")]
    if not sets:
        raise MissingPath(f"{key}={path}: no .bin verification set in this folder; expected insightface's "
                          f"lfw.bin, cfp_fp.bin, agedb_30.bin ... (they come with faces_emore/)")
    for name in sets:
        bin_set(key, os.path.join(path, name))


def bin_set(key: str, path: str) -> None:
    with open(path, "rb") as f:
        head = f.read(2)
    if not head.startswith(PICKLE_STARTS):
        raise BadFile(f"{key}: {path}: not an insightface .bin set (it starts {head.hex(' ') or 'empty'}, a .bin set "
                      f"is a pickle of (images, issame)); remove it from the folder or give the right folder")


def text_lines(key: str, path: str) -> None:
    """A text file of lines (a pairs list, LFW's pairs.txt): not a folder, not empty, not binary."""
    if os.path.isdir(path):
        raise BadFile(f"{key}={path}: a folder; expected a text file of pairs (path1 path2 0|1, or LFW's pairs.txt)")
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.strip():
        raise BadFile(f"{key}={path}: an empty file; expected lines of pairs (path1 path2 0|1, or LFW's pairs.txt)")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:  # not only a character cut at the end of the 4 KiB read
            raise BadFile(f"{key}={path}: binary, not text; expected lines of pairs (path1 path2 0|1, or LFW's "
                          f"pairs.txt)") from None


def testpack(key: str, path: str) -> None:
    """insightface's megaface_testpack_v1.0."""
    # imported here: that module imports numpy, which `--help` and the other keys' checks do without
    from elasticface.eval.identification.testpack import DISTRACTOR_DIR, DISTRACTOR_LIST, PROBE_DIR, PROBE_LIST

    names = _folder(key, path, "insightface's megaface_testpack_v1.0")
    need = (PROBE_DIR, DISTRACTOR_DIR, PROBE_LIST, DISTRACTOR_LIST)
    missing = [n for n in need if n not in names]
    if missing:
        below = [d for d in names if os.path.isdir(os.path.join(path, d, PROBE_DIR))]
        hint = f"; {os.path.join(path, below[0])} holds a testpack" if below else ""
        raise MissingPath(f"{key}={path}: no {', '.join(missing)} here{hint}; expected insightface's "
                          f"megaface_testpack_v1.0 ({', '.join(need)}), or elasticface-megaface-pack's output")


def tinyface(key: str, path: str) -> None:
    """TinyFace's test split: Probe/, Gallery_Match/, Gallery_Distractor/ there, in AdaFace's aligned copy or in
    tinyface/Testing_Set/, each holding an image."""
    from elasticface.eval.identification.tinyface import check_split

    check_split(path)


def templatelists(key: str, path: str) -> None:
    from elasticface.eval.identification.testpack import PROBE_TEMPLATES

    names = _folder(key, path, "the MegaFace devkit's templatelists/ folder")
    if PROBE_TEMPLATES not in names:
        raise MissingPath(f"{key}={path}: no {PROBE_TEMPLATES} here; expected the devkit's templatelists/ folder")


def ijb_root(key: str, path: str) -> None:
    """insightface's IJB layout: <root>/<IJBB|IJBC>/meta/... (or the <target> folder itself)."""
    names = _folder(key, path, "insightface's IJB folder (<root>/IJBC/meta, <root>/IJBC/loose_crop)")
    if "meta" in names or any(os.path.isdir(os.path.join(path, n, "meta")) for n in names):
        return
    raise MissingPath(f"{key}={path}: no meta/ folder here or in a subfolder; expected insightface's IJB layout "
                      f"<root>/IJBC/meta/ijbc_face_tid_mid.txt and <root>/IJBC/loose_crop/")


def model_file(key: str, path: str) -> None:
    model_file_kind(path, key)


def torch_checkpoint(key: str, path: str) -> None:
    kind = model_file_kind(path, key)
    if kind not in ("torch-zip", "torch-legacy"):
        raise BadFile(f"{key}={path}: a {kind} file, not a checkpoint; expected a Lightning .ckpt this project "
                      f"wrote (checkpoints/last.ckpt)")


def weights_file(key: str, path: str) -> None:
    """What train.py's weights= reads: a state_dict, a Lightning .ckpt's backbone or an MXNet .params."""
    kind = model_file_kind(path, key)
    if kind in ("onnx", "torchscript"):
        raise BadFile(f"{key}={path}: a {kind} file, which holds no trainable weights for train.py; expected "
                      f"{', '.join(k for k in MODEL_FORMATS if 'ONNX' not in k and 'TorchScript' not in k)}")
