"""`scripts/lfw_y1.sh` as a user runs it, on an LFW-layout folder of photos, LFW's pairs.txt format and a
y1-layout MXNet file (random weights written by MXNet 1.9.1): photos -> elasticface-align -> lfw.bin -> eval.py.

The pairs the .bin must hold are spelled out by the test from the pairs.txt it wrote; the faces in it are the
aligned crops elasticface-align wrote (whose pixels test_align_command checks against insightface's rule).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from conftest import ROOT
from elasticface.data.pair_files import load_bin

skdata = pytest.importorskip("skimage.data")
SCRIPT = ROOT / "scripts" / "lfw_y1.sh"
Y1 = ROOT / "tests" / "data" / "mxnet" / "y1"
# two people, two photos each; a header "10 1": 10 folds of 1 matched then 1 mismatched pair
PEOPLE = {"Astro_Left": lambda im: im, "Astro_Right": lambda im: im.transpose(Image.FLIP_LEFT_RIGHT)}


def script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHON=sys.executable, ALIGN_ARGS="--pick center --min-face-size 40 --device cpu --no-progress")
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def lfw(tmp_path: Path) -> tuple[Path, Path, Path, list[tuple[str, str, bool]]]:
    """Photos, pairs.txt, a copy of the y1 files (eval writes beside them), and the pairs in pairs.txt order."""
    astronaut = Image.fromarray(skdata.astronaut()).resize((320, 320), Image.BILINEAR)  # face ~55 px
    photos = tmp_path / "lfw"
    for name, turn in PEOPLE.items():
        (photos / name).mkdir(parents=True)
        turn(astronaut).save(photos / name / f"{name}_0001.jpg", quality=95)
        # the second photo: the same face 12 px further right and down in a grey frame
        framed = Image.new("RGB", (320, 320), (128, 128, 128))
        framed.paste(turn(astronaut).crop((0, 0, 308, 308)), (12, 12))
        framed.save(photos / name / f"{name}_0002.jpg", quality=95)
    (a, b) = PEOPLE
    lines, expected = ["10\t1"], []
    for fold in range(10):
        name = (a, b)[fold % 2]
        lines.append(f"{name}\t1\t2")
        expected.append((f"{name}/{name}_0001.jpg", f"{name}/{name}_0002.jpg", True))
        lines.append(f"{a}\t{1 + fold % 2}\t{b}\t{2 - fold % 2}")
        expected.append((f"{a}/{a}_{1 + fold % 2:04d}.jpg", f"{b}/{b}_{2 - fold % 2:04d}.jpg", False))
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("\n".join(lines) + "\n")
    y1 = shutil.copytree(Y1, tmp_path / "y1") / "model-0000.params"
    return photos, pairs, y1, expected


def accuracy(done: subprocess.CompletedProcess) -> str:
    """The figure eval.py logs for lfw, as the user reads it."""
    found = re.findall(r"lfw: acc \d\.\d+ \+- \d\.\d+", done.stdout + done.stderr)
    assert len(found) == 1, done.stdout + done.stderr
    return found[0]


@pytest.mark.slow
def test_photos_to_accuracy_and_the_aligned_shortcut_agree(lfw, tmp_path):
    photos, pairs, y1, expected = lfw
    done = script(str(photos), str(pairs), str(y1), "work", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    work = tmp_path / "work"
    assert done.stdout.rstrip().endswith("published (insightface model zoo, y1): LFW 99.50")
    # every photo aligned, and the .bin holds LFW's pairs in pairs.txt's order, as the aligned crops
    assert sorted(p.relative_to(work / "aligned").as_posix() for p in (work / "aligned").rglob("*.jpg")) == sorted(
        {path for first, second, _ in expected for path in (first, second)})
    pair_set = load_bin(str(work / "bins" / "lfw.bin"), "lfw")
    assert pair_set.issame.tolist() == [same for _, _, same in expected]
    crops = [(work / "aligned" / path).read_bytes() for pair in expected for path in pair[:2]]
    assert [pair_set.raw(i) for i in range(2 * len(expected))] == crops  # 112x112 JPEGs are stored byte for byte
    results = json.loads((work / "eval" / "results.json").read_text())["results"]
    assert [row["benchmark"] for row in results] == ["lfw"] and 0.0 <= results[0]["acc"] <= 1.0

    # --aligned on the faces just written skips detection and scores the same pairs the same
    again = script("--aligned", str(work / "aligned"), str(pairs), str(y1), "again", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (tmp_path / "again" / "aligned").exists()
    rerun = json.loads((tmp_path / "again" / "eval" / "results.json").read_text())["results"]
    assert [{**row, "seconds": None} for row in rerun] == [{**row, "seconds": None} for row in results]
    assert accuracy(again) == accuracy(done)


def test_usage_and_missing_files_are_named(lfw, tmp_path):
    photos, pairs, y1, _ = lfw
    usage = script(str(photos), str(pairs), cwd=tmp_path)
    assert usage.returncode == 2 and "scripts/lfw_y1.sh [--aligned] LFW_PHOTOS PAIRS_TXT Y1_PARAMS" in usage.stdout
    (y1.parent / "model-symbol.json").unlink()  # MXNet's loader needs it beside the params
    missing = script(str(photos), str(pairs), str(y1), cwd=tmp_path)
    symbol = y1.parent / "model-symbol.json"
    assert missing.returncode == 1 and missing.stderr.strip() == f"lfw_y1.sh: {symbol} not found"
    assert not (tmp_path / "lfw_y1").exists()
