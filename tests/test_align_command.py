"""`elasticface-align SRC OUT` as a user runs it: layout, faces.csv, the report of photos without a face, bad
files named and skipped, EXIF orientation, resume, --all-faces, the pick rule and landmark files. Pixels are
checked against insightface's rule written out here (scikit-image + OpenCV) from the landmarks in faces.csv."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from PIL import Image

from elasticface.cli.align import main

skdata = pytest.importorskip("skimage.data")
cv2 = pytest.importorskip("cv2")
from helpers.insightface_align import ASTRONAUT_LANDMARKS, assert_opencv_crop, insightface_crop  # noqa: E402


def rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def landmarks_of(row: dict[str, str]) -> np.ndarray:
    return np.array([float(row[f"lm{i}_{a}"]) for i in range(1, 6) for a in "xy"]).reshape(5, 2)


@pytest.fixture(scope="module")
def detected(tmp_path_factory):
    """One detection run over a small folder of good and bad photos (the slow part, shared)."""
    src = tmp_path_factory.mktemp("photos")
    out = src.parent / (src.name + "_out")
    photo = Image.fromarray(skdata.astronaut()).resize((320, 320), Image.BILINEAR)  # face ~55 px: a quick pyramid
    (src / "people" / "sub").mkdir(parents=True)
    photo.save(src / "people" / "astro.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored turned 90 degrees; a viewer turns it back
    photo.transpose(Image.ROTATE_90).save(src / "people" / "sub" / "turned.jpg", exif=exif, quality=98)
    photo.convert("L").save(src / "people" / "grey.png")
    Image.new("RGB", (160, 120), (90, 90, 90)).save(src / "empty.jpg")
    data = (src / "people" / "sub" / "turned.jpg").read_bytes()
    (src / "truncated.jpg").write_bytes(data[: len(data) // 3])
    (src / "notes.png").write_text("not a photo")
    (src / "readme.txt").write_text("ignored: not a photo extension")
    code = main([str(src), str(out), "--min-face-size", "40", "--batch-size", "4", "--device", "cpu", "--no-progress"])
    return src, out, code


def test_layout_csv_and_report(detected, capsys):
    src, out, code = detected
    assert code == 0
    faces = {r["source"]: r for r in rows(out / "faces.csv")}
    assert set(faces) == {"people/astro.png", "people/grey.png", "people/sub/turned.jpg"}
    for name, row in faces.items():
        assert row["path"] == name and (out / name).is_file()
        assert Image.open(out / name).size == (112, 112)
        assert 0.9 < float(row["score"]) <= 1.0
    report = {r["source"]: r for r in rows(out / "align_report.csv")}
    assert report["empty.jpg"]["problem"] == "no_face"
    assert report["truncated.jpg"]["problem"] == "unreadable" and "truncated.jpg" in report["truncated.jpg"]["detail"]
    assert report["notes.png"]["problem"] == "unreadable" and "notes.png" in report["notes.png"]["detail"]
    assert not (out / "empty.jpg").exists()


def test_faces_are_insightface_crops_of_the_photo(detected):
    src, out, _ = detected
    row = next(r for r in rows(out / "faces.csv") if r["source"] == "people/astro.png")
    photo = np.asarray(Image.open(src / row["source"]).convert("RGB"))
    ours = np.asarray(Image.open(out / row["path"]))
    assert_opencv_crop(ours, insightface_crop(photo, landmarks_of(row)), same_matrix=False)  # 3 decimals


def test_exif_orientation_is_applied(detected):
    _, out, _ = detected
    faces = {r["source"]: landmarks_of(r) for r in rows(out / "faces.csv")}
    # the turned photo, shown upright, is the astronaut again: the same landmarks up to JPEG noise
    np.testing.assert_allclose(faces["people/sub/turned.jpg"], faces["people/astro.png"], atol=2.0)


def test_rerun_resumes(detected, capsys):
    src, out, _ = detected
    os.remove(out / "people" / "grey.png")
    assert main([str(src), str(out), "--min-face-size", "40", "--device", "cpu", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    # astro and turned are done, empty.jpg was reported without a face; grey is redone, the bad files retried
    assert "1 face written from 1 photo, 3 done by an earlier run" in printed
    assert (out / "people" / "grey.png").is_file()
    assert sorted(r["source"] for r in rows(out / "faces.csv")) == [
        "people/astro.png", "people/grey.png", "people/sub/turned.jpg"]
    problems = sorted((r["source"], r["problem"]) for r in rows(out / "align_report.csv"))
    assert problems == [("empty.jpg", "no_face"), ("notes.png", "unreadable"), ("truncated.jpg", "unreadable")]


def _two_faces(tmp_path) -> str:
    """The astronaut twice, the right one at 0.7 scale, offset down so the two differ in size and place."""
    photo = Image.fromarray(skdata.astronaut()).crop((100, 0, 350, 260))
    canvas = Image.new("RGB", (520, 300), (0, 0, 0))
    canvas.paste(photo, (0, 0))
    canvas.paste(photo.resize((175, 182)), (300, 100))
    (tmp_path / "src").mkdir()
    canvas.save(tmp_path / "src" / "pair.png")
    return str(tmp_path / "src")


def test_all_faces_and_pick_rule(tmp_path, capsys):
    src = _two_faces(tmp_path)
    assert main([src, str(tmp_path / "one"), "--min-face-size", "40", "--device", "cpu", "--no-progress"]) == 0
    assert "pair.png: 2 faces found; kept the largest one" in capsys.readouterr().err
    (kept,) = rows(tmp_path / "one" / "faces.csv")
    assert float(kept["box_x1"]) < 260  # the full-size face on the left
    assert main([src, str(tmp_path / "centre"), "--pick", "center", "--min-face-size", "40", "--no-progress"]) == 0
    (kept,) = rows(tmp_path / "centre" / "faces.csv")
    assert float(kept["box_x1"]) > 260  # the small face is nearer the centre (260, 150)
    assert main([src, str(tmp_path / "all"), "--all-faces", "--min-face-size", "40", "--no-progress"]) == 0
    names = sorted(r["path"] for r in rows(tmp_path / "all" / "faces.csv"))
    assert names == ["pair_0.png", "pair_1.png"]
    assert all((tmp_path / "all" / n).is_file() for n in names)


def _insightface_txt(path, entries):
    with open(path, "w") as f:
        for name, points in entries:
            f.write(name + " " + " ".join(f"{v:.4f}" for v in np.ravel(points)) + " 0.99\n")


def test_landmarks_from_files_skip_detection(tmp_path, capsys):
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    photo = skdata.astronaut()
    Image.fromarray(photo).save(src / "x" / "a.png")
    Image.fromarray(photo[:, ::-1].copy()).save(src / "x" / "b.png")
    _insightface_txt(tmp_path / "pts.txt", [("x/a.png", ASTRONAUT_LANDMARKS)])
    weights = tmp_path / "no_weights"  # a detector could not even be built: none is needed
    weights.mkdir()
    assert main([str(src), str(tmp_path / "out"), "--landmarks", str(tmp_path / "pts.txt"),
                 "--weights-dir", str(weights), "--no-progress"]) == 0
    ours = np.asarray(Image.open(tmp_path / "out" / "x" / "a.png")).astype(int)
    assert_opencv_crop(ours, insightface_crop(photo, ASTRONAUT_LANDMARKS))
    report = rows(tmp_path / "out" / "align_report.csv")
    assert [(r["source"], r["problem"]) for r in report] == [("x/b.png", "no_landmarks")]
    assert "pts.txt" in report[0]["detail"]
    # faces.csv is itself a landmark file; a .npy follows the sorted photo order
    np.save(tmp_path / "pts.npy", np.stack([ASTRONAUT_LANDMARKS, ASTRONAUT_LANDMARKS * [-1, 1] + [511, 0]]))
    for given in (tmp_path / "out" / "faces.csv", tmp_path / "pts.npy"):
        out = tmp_path / f"again_{given.suffix}"
        assert main([str(src), str(out), "--landmarks", str(given), "--no-progress"]) == 0
        again = np.asarray(Image.open(out / "x" / "a.png")).astype(int)
        assert np.abs(again - ours).max() <= 1
    assert (tmp_path / "again_.npy" / "x" / "b.png").is_file()


def test_landmark_file_with_other_names_is_refused(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    Image.fromarray(skdata.astronaut()).save(src / "a.png")
    _insightface_txt(tmp_path / "pts.txt", [("elsewhere/z.jpg", ASTRONAUT_LANDMARKS)])
    assert main([str(src), str(tmp_path / "out"), "--landmarks", str(tmp_path / "pts.txt"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "pts.txt" in err and "'elsewhere/z.jpg'" in err and "'a.png'" in err


def test_pixel_limit_refuses_before_decoding(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    Image.new("RGB", (400, 300)).save(src / "big.png")
    _insightface_txt(tmp_path / "pts.txt", [("big.png", ASTRONAUT_LANDMARKS)])
    assert main([str(src), str(tmp_path / "out"), "--landmarks", str(tmp_path / "pts.txt"),
                 "--max-pixels", "100000", "--no-progress"]) == 0
    (row,) = rows(tmp_path / "out" / "align_report.csv")
    assert row["problem"] == "unreadable" and "big.png" in row["detail"] and "120,000 pixels" in row["detail"]


def test_console_script_as_typed(tmp_path):
    """The installed `elasticface-align` command, with a landmark file (no detector needed)."""
    import shutil
    import subprocess
    import sys

    exe = shutil.which("elasticface-align", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("the package's console scripts are not installed in this environment")
    src = tmp_path / "photos"
    src.mkdir()
    Image.fromarray(skdata.astronaut()).save(src / "a.jpg", quality=95)
    _insightface_txt(tmp_path / "pts.txt", [("a.jpg", ASTRONAUT_LANDMARKS)])
    proc = subprocess.run([exe, str(src), str(tmp_path / "faces"), "--landmarks", str(tmp_path / "pts.txt")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 photo: 1 face written from 1 photo" in proc.stdout
    assert Image.open(tmp_path / "faces" / "a.jpg").size == (112, 112)


def test_missing_detector_weights_name_the_install_line(tmp_path, capsys):
    src = tmp_path / "photos"
    src.mkdir()
    Image.new("RGB", (64, 48)).save(src / "a.png")
    (tmp_path / "empty").mkdir()
    assert main([str(src), str(tmp_path / "out"), "--weights-dir", str(tmp_path / "empty"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "pnet.pt not found" in err and "pip install --no-deps facenet-pytorch==2.6.0" in err


def test_links_to_folders_and_files_are_followed_and_a_loop_is_named(tmp_path, capsys):
    """A dataset assembled from symbolic links, as `find -L` sees it; a link back to an enclosing folder is
    named once and not followed around."""
    store, src = tmp_path / "store", tmp_path / "src"
    (store / "people").mkdir(parents=True)
    Image.fromarray(skdata.astronaut()).save(store / "people" / "a.png")
    Image.fromarray(skdata.astronaut()).save(store / "b.png")
    (src / "own").mkdir(parents=True)
    (src / "people").symlink_to(store / "people", target_is_directory=True)
    (src / "own" / "b.png").symlink_to(store / "b.png")
    (src / "own" / "again").symlink_to(src, target_is_directory=True)
    _insightface_txt(tmp_path / "pts.txt", [("people/a.png", ASTRONAUT_LANDMARKS), ("own/b.png", ASTRONAUT_LANDMARKS)])
    assert main([str(src), str(tmp_path / "out"), "--landmarks", str(tmp_path / "pts.txt"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "2 photos: 2 faces written from 2 photos" in captured.out
    assert (tmp_path / "out" / "people" / "a.png").is_file() and (tmp_path / "out" / "own" / "b.png").is_file()
    assert f"{src / 'own' / 'again'}: a link back to" in captured.err


@pytest.mark.parametrize("content", ["nothing", "no photo"])
def test_a_source_without_photos_is_an_error_naming_it(tmp_path, capsys, content):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    if content == "no photo":
        (src / "sub" / "notes.txt").write_text("not a photo")
    assert main([str(src), str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"source folder {src} holds no JPEG/PNG photo" in err
    assert not (tmp_path / "out").exists()


def test_a_photo_without_a_face_is_named_counted_and_the_run_goes_on(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    Image.new("RGB", (64, 48), (90, 90, 90)).save(src / "blank.png")
    Image.fromarray(skdata.astronaut()).resize((128, 128)).save(src / "small.png")
    assert main([str(src), str(tmp_path / "out"), "--min-face-size", "30", "--device", "cpu", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"{src / 'blank.png'}: no face found" in captured.err.splitlines()
    assert "2 photos: 1 face written from 1 photo" in captured.out and "1 no face" in captured.out
    assert [(r["source"], r["problem"]) for r in rows(tmp_path / "out" / "align_report.csv")] == [
        ("blank.png", "no_face")]
