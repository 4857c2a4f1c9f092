"""Nothing written where it was not asked (docs/security.md): every output inside the folder the user named, an
existing output refused unless `--overwrite`, and outputs whole or not at all.

The rules live in one place, `elasticface.utils.output_paths`; here each writer and command is held to them:
a MegaFace list entry climbing out of `feature_out/` is refused before anything is written; each command given an
output folder with entries (or an output file that exists) refuses with `OutputExists` naming it and writes with
`--overwrite`; a crash in the middle of a write leaves the old file and no temporary file.
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT
from elasticface.utils.errors import BadFile, OutputExists, UserError, one_line
from elasticface.utils.output_paths import atomic_path, atomic_write, inside, refuse_existing
from helpers.images import smooth_jpeg
from test_cfp_split import cfp  # noqa: F401 - the CFP dataset fixture, reused
from test_lfw_split import lfw  # noqa: F401 - the LFW fixture, reused


def tree(root: Path) -> list[str]:
    """Every file under `root`, relative, sorted (hidden temporaries included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


def refusal(call, capsys) -> str:
    """The one line a command gives when it refuses: exit status 2 with one line on stderr (the contract of
    cli/preflight.py)."""
    capsys.readouterr()
    try:
        code = call()
    except SystemExit as stop:
        code = stop.code
    assert code == 2, f"not refused: exit {code}"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def faces_folder(root: Path, people: dict[str, int]) -> Path:
    for k, (person, n) in enumerate(people.items()):
        (root / person).mkdir(parents=True)
        for i in range(n):
            (root / person / f"{person}_{i + 1:04d}.jpg").write_bytes(smooth_jpeg(100 * k + i))
    return root


PEOPLE = {"Many_A": 4, "Many_B": 4, "Few_C": 2, "One_D": 1, "One_E": 1}


# -- the rules --------------------------------------------------------------------------------------------------


def test_inside_refuses_names_that_leave_the_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert inside(out, "a/b.jpg") == out / "a" / "b.jpg"
    assert inside(out, "a/../b.jpg") == out / "a/../b.jpg"  # climbs, but stays inside
    (tmp_path / "elsewhere").mkdir()
    (out / "link").symlink_to(tmp_path / "elsewhere")
    for name in ("../x.jpg", "a/../../x.jpg", "/etc/x.jpg", "link/x.jpg", ".", ""):
        with pytest.raises(BadFile, match="outside the output folder") as caught:
            inside(out, name, "list.txt")
        assert str(caught.value).startswith("list.txt: ") and repr(name) in str(caught.value)


def test_refuse_existing_names_the_folder_and_how_many_entries(tmp_path):
    refuse_existing(tmp_path / "new")  # nothing there: fine
    (tmp_path / "empty").mkdir()
    refuse_existing(tmp_path / "empty")  # an empty folder: fine
    (tmp_path / "full").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "full" / name).write_text("x")
    with pytest.raises(OutputExists) as caught:
        refuse_existing(tmp_path / "full")
    assert isinstance(caught.value, (UserError, FileExistsError))
    assert one_line(caught.value) == (f"{tmp_path / 'full'}: the output folder already holds 3 entries; choose a new "
                                      f"or empty folder, or pass --overwrite to write into it")
    refuse_existing(tmp_path / "full", overwrite=True)
    with pytest.raises(OutputExists, match=r"out.bin: the output file exists; .* pass --overwrite to replace it"):
        (tmp_path / "out.bin").write_bytes(b"x")
        refuse_existing(tmp_path / "out.bin")


# -- (a) a MegaFace list entry that climbs out of feature_out/ --------------------------------------------------


def test_megaface_devkit_writer_refuses_an_entry_climbing_out_of_feature_out(tmp_path):
    from elasticface.eval.identification.devkit_files import distractor_writer
    from elasticface.eval.identification.testpack import Testpack

    devkit = tmp_path / "devkit"
    pack = Testpack(root=str(tmp_path / "pack"), probes=["A/A_1.png"], identities=["A"],
                    distractors=["0/1x0@N00/0_0.jpg", "../../evil.jpg"], probe_noise=np.zeros(1, bool),
                    distractor_noise=np.zeros(2, bool))
    write = distractor_writer(str(devkit), pack, "algo")
    with pytest.raises(BadFile, match=r"'\.\./\.\./evil\.jpg'.*outside the output folder"):
        write(np.arange(2), np.ones((2, 8), np.float32))
    assert tree(tmp_path) == [], "nothing written, inside feature_out/ or out of it"
    write(np.arange(1), np.ones((1, 8), np.float32))  # the good entry alone is written as before
    assert tree(devkit) == ["feature_out/megaface/0/1x0@N00/0_0.jpg_algo.bin",
                            "feature_out_clean/megaface/0/1x0@N00/0_0.jpg_algo.bin"]


def test_megaface_devkit_writer_refuses_a_link_leading_out(tmp_path):
    from elasticface.eval.identification.devkit_files import distractor_file, write_features

    feature_out, elsewhere = tmp_path / "devkit" / "feature_out", tmp_path / "elsewhere"
    (feature_out / "megaface").mkdir(parents=True)
    elsewhere.mkdir()
    (feature_out / "megaface" / "0").symlink_to(elsewhere)
    with pytest.raises(BadFile, match=r"'0/a/x\.jpg'.*outside the output folder"):
        write_features([distractor_file(str(feature_out), "0/a/x.jpg", "algo")], np.ones((1, 4), np.float32))
    assert tree(elsewhere) == []


def test_megaface_eval_with_a_crafted_testpack_writes_nothing_outside(tmp_path):
    from helpers.megaface_files import distractor_names, evaluate_pack, probe_names, write_feature_files, write_lists

    probes, distractors = probe_names({"A": 3, "B": 3}), distractor_names(6)
    rng = np.random.default_rng(0)
    write_feature_files(tmp_path / "features", probes, rng.normal(size=(6, 8)), distractors, rng.normal(size=(6, 8)))
    write_lists(tmp_path / "pack", probes, [*distractors, "../../evil.jpg"])
    before = tree(tmp_path)
    with pytest.raises(BadFile, match=r"'\.\./\.\./evil\.jpg'"):
        evaluate_pack(None, tmp_path / "pack", sizes=[3], features=str(tmp_path / "features"), algo="algo",
                      devkit_out=str(tmp_path / "devkit"))
    assert tree(tmp_path) == before


# -- (b) each command with an existing output ---------------------------------------------------------------------


def command(name: str) -> list[str]:
    """The installed console script (as a user types it), else `python -m` of its module."""
    script = Path(sys.executable).parent / name
    module = "elasticface.cli." + name.removeprefix("elasticface-").replace("-", "_")
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "ELASTICFACE_TRACEBACK": "0"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def assert_refused_as_typed(out: subprocess.CompletedProcess, names: str) -> None:
    """Exit 2 and one line naming `names` (the contract of cli/preflight.py)."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines and names in lines[-1] and "--overwrite" in lines[-1], out.stderr[-2000:]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]


def test_megaface_pack_refuses_a_folder_with_entries_and_writes_with_overwrite(tmp_path, capsys):
    from elasticface.cli.megaface_pack import main
    from elasticface.eval.identification.stand_in import build_megaface_pack

    faces = faces_folder(tmp_path / "faces", PEOPLE)
    out = tmp_path / "pack"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    with pytest.raises(OutputExists, match=rf"{out}: the output folder already holds 1 entry"):
        build_megaface_pack(str(faces), str(out), 4, 4)
    line = refusal(lambda: main([str(faces), str(out), "--min-probe-photos", "4"]), capsys)
    assert str(out) in line and "1 entry" in line and "--overwrite" in line
    assert tree(out) == ["mine.txt"]
    as_typed = run([*command("elasticface-megaface-pack"), str(faces), str(out), "--min-probe-photos", "4",
                    "--overwrite"])
    assert as_typed.returncode == 0, as_typed.stderr[-2000:]
    assert (out / "megaface_lst").read_text().splitlines() == ["O/One_D/One_D_0001.jpg", "O/One_E/One_E_0001.jpg"]
    assert (out / "mine.txt").read_text() == "the user's"
    assert_refused_as_typed(run([*command("elasticface-megaface-pack"), str(faces), str(out)]), str(out))


def test_convert_folder2rec_refuses_its_own_files_not_a_folder_with_others(tmp_path, capsys):
    from elasticface.cli.convert import main
    from elasticface.data.convert import write_recordio

    faces = faces_folder(tmp_path / "faces", PEOPLE)
    out = tmp_path / "rec"
    out.mkdir()
    (out / "lfw.bin").write_bytes(b"a benchmark beside the set")  # insightface's layout: .rec and .bin together
    assert main(["folder2rec", str(faces), str(out)]) == 0
    assert tree(out) == ["lfw.bin", "property", "train.idx", "train.rec"]
    rec = (out / "train.rec").read_bytes()
    with pytest.raises(OutputExists, match=rf"{out / 'train.rec'}: the output file exists \(and 2 more"):
        write_recordio(str(faces), str(out))
    line = refusal(lambda: main(["folder2rec", str(faces), str(out)]), capsys)
    assert str(out / "train.rec") in line and "--overwrite" in line
    with pytest.raises(BadFile, match="--prefix: the entry '../train.rec'"):
        write_recordio(str(faces), str(out), prefix="../train")
    assert not (tmp_path / "train.rec").exists()
    as_typed = run([*command("elasticface-convert"), "folder2rec", str(faces), str(out), "--overwrite"])
    assert as_typed.returncode == 0, as_typed.stderr[-2000:]
    assert (out / "train.rec").read_bytes() == rec and tree(out) == ["lfw.bin", "property", "train.idx", "train.rec"]
    assert_refused_as_typed(run([*command("elasticface-convert"), "folder2rec", str(faces), str(out)]),
                            str(out / "train.rec"))


def test_convert_rec2folder_pairs2bin_and_lowres_refuse_existing_outputs(tmp_path, capsys):
    from elasticface.cli.convert import main
    from elasticface.data.convert import pairs_to_bin, recordio_to_folder, write_recordio
    from elasticface.data.low_resolution import degrade_folder

    faces = faces_folder(tmp_path / "faces", PEOPLE)
    write_recordio(str(faces), str(tmp_path / "rec"))
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("Many_A/Many_A_0001.jpg Many_A/Many_A_0002.jpg 1\nMany_A/Many_A_0001.jpg One_D/One_D_0001.jpg 0\n")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("the user's")
    (tmp_path / "out.bin").write_bytes(b"the user's")
    cases = [
        (lambda: recordio_to_folder(str(tmp_path / "rec"), str(taken)),
         ["rec2folder", str(tmp_path / "rec"), str(taken)], str(taken)),
        (lambda: pairs_to_bin(str(pairs), str(faces), str(tmp_path / "out.bin")),
         ["pairs2bin", str(pairs), str(faces), str(tmp_path / "out.bin")], str(tmp_path / "out.bin")),
        (lambda: degrade_folder(faces, taken), ["lowres", str(faces), str(taken)], str(taken)),
    ]
    for function, argv, named in cases:
        with pytest.raises(OutputExists, match=named):
            function()
        line = refusal(lambda: main(argv), capsys)  # noqa: B023 - called at once
        assert named in line and "--overwrite" in line
    assert tree(taken) == ["x"] and (tmp_path / "out.bin").read_bytes() == b"the user's"
    for _, argv, _ in cases:
        assert main([*argv, "--overwrite"]) == 0, argv
    assert len(pickle.loads((tmp_path / "out.bin").read_bytes())[1]) == 2
    assert {"x", "lowres.csv"} <= set(tree(taken)) and any(name.endswith("_0001.jpg") for name in tree(taken))


def test_lfw_split_refuses_a_folder_with_entries_and_a_name_leading_out(lfw, tmp_path, capsys):  # noqa: F811
    from elasticface.cli.lfw_split import main
    from elasticface.data.lfw_split import split_lfw

    faces, pairs, _ = lfw
    out = tmp_path / "split"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    with pytest.raises(OutputExists, match=rf"{out}: the output folder already holds 1 entry"):
        split_lfw(faces, pairs, out)
    line = refusal(lambda: main([str(faces), str(pairs), str(out)]), capsys)
    assert str(out) in line and "--overwrite" in line
    assert main([str(faces), str(pairs), str(out), "--overwrite"]) == 0
    assert (out / "lfw_fold10.bin").is_file() and (out / "notes.txt").read_text() == "the user's"
    # a training person's name in pairs.txt that climbs out of OUT/train: refused before any folder is made
    lines = pairs.read_text().splitlines()
    lines[1] = "\t".join(["../../escaped", *lines[1].split("\t")[1:]])
    pairs.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadFile, match=rf"{pairs}: the entry '../../escaped'"):
        split_lfw(faces, pairs, tmp_path / "split2")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "split2" / "train").exists()


def test_cfp_split_refuses_a_folder_with_entries(cfp, tmp_path, capsys):  # noqa: F811
    from elasticface.cli.cfp_split import main
    from elasticface.data.cfp_split import split_cfp

    root, faces, _ = cfp
    out = tmp_path / "split"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    with pytest.raises(OutputExists, match=rf"{out}: the output folder already holds 1 entry"):
        split_cfp(root, faces, out)
    line = refusal(lambda: main([str(root), str(faces), str(out)]), capsys)
    assert str(out) in line and "--overwrite" in line
    assert main([str(root), str(faces), str(out), "--overwrite"]) == 0
    assert (out / "cfp_fp_splits6_10.bin").is_file() and (out / "notes.txt").read_text() == "the user's"
    as_typed = run([*command("elasticface-cfp-split"), str(root), str(faces), str(out)])
    assert as_typed.returncode == 2 and len(as_typed.stderr.strip().splitlines()) == 1, as_typed.stderr[-2000:]


def test_align_refuses_to_write_over_files_no_earlier_run_wrote(tmp_path, capsys):
    from elasticface.align.folder import align_folder
    from elasticface.cli.align import main
    from helpers.insightface_align import ASTRONAUT_LANDMARKS

    skdata = pytest.importorskip("skimage.data")
    src = tmp_path / "photos"
    (src / "x").mkdir(parents=True)
    Image.fromarray(skdata.astronaut()).save(src / "x" / "a.jpg", quality=95)
    pts = tmp_path / "pts.txt"
    pts.write_text("x/a.jpg " + " ".join(f"{v:.4f}" for v in np.ravel(ASTRONAUT_LANDMARKS)) + " 0.99\n")
    # a folder with other files (the README's `elasticface-align photos/ faces/` where faces/ holds some): fine
    others = tmp_path / "others"
    (others / "id0").mkdir(parents=True)
    (others / "id0" / "0.jpg").write_bytes(b"the user's")
    assert main([str(src), str(others), "--landmarks", str(pts), "--no-progress"]) == 0
    assert (others / "x" / "a.jpg").is_file() and (others / "id0" / "0.jpg").read_bytes() == b"the user's"
    # a file where a face would be written, in a folder no earlier run wrote: refused, then --overwrite
    taken = tmp_path / "taken"
    (taken / "x").mkdir(parents=True)
    (taken / "x" / "a.jpg").write_bytes(b"the user's")
    with pytest.raises(OutputExists, match=rf"{taken / 'x' / 'a.jpg'}"):
        align_folder(str(src), str(taken), landmarks_file=str(pts), progress=False)
    line = refusal(lambda: main([str(src), str(taken), "--landmarks", str(pts), "--no-progress"]), capsys)
    assert str(taken / "x" / "a.jpg") in line and "--overwrite" in line
    assert tree(taken) == ["x/a.jpg"] and (taken / "x" / "a.jpg").read_bytes() == b"the user's"
    assert main([str(src), str(taken), "--landmarks", str(pts), "--no-progress", "--overwrite"]) == 0
    assert Image.open(taken / "x" / "a.jpg").size == (112, 112)
    # rerunning resumes in its own folder (faces.csv): no --overwrite needed
    assert main([str(src), str(taken), "--landmarks", str(pts), "--no-progress"]) == 0


def test_export_refuses_an_existing_file(tmp_path, capsys):
    from elasticface.cli.export import main
    from helpers.insightface_layout import mobilefacenet_layout, released_state_dict

    weights = tmp_path / "model.pth"
    torch.save(released_state_dict(mobilefacenet_layout()), weights)
    out = tmp_path / "backbone.pth"
    out.write_bytes(b"the user's")
    line = refusal(lambda: main(["--weights", str(weights), "--format", "pth", "--out", str(out)]), capsys)
    assert str(out) in line and "--overwrite" in line and out.read_bytes() == b"the user's"
    assert main(["--weights", str(weights), "--format", "pth", "--out", str(out), "--overwrite"]) == 0
    assert torch.load(out, weights_only=True)


def test_embed_refuses_an_existing_output(tmp_path, capsys):
    from elasticface.cli.embed import main
    from elasticface.export import export_torchscript
    from helpers.pool_embedder import PoolEmbedder

    faces = faces_folder(tmp_path / "faces", {"A": 2})
    model = tmp_path / "m.pt"
    export_torchscript(PoolEmbedder().eval(), str(model))
    argv = ["--model", str(model), "--images", str(faces), "--device", "cpu", "--allow-torchscript"]
    (tmp_path / "emb.txt").write_text("the user's")
    line = refusal(lambda: main([*argv, "--out", str(tmp_path / "emb.npy")]), capsys)
    assert str(tmp_path / "emb.txt") in line and "--overwrite" in line
    assert (tmp_path / "emb.txt").read_text() == "the user's" and not (tmp_path / "emb.npy").exists()
    assert main([*argv, "--out", str(tmp_path / "emb.npy"), "--overwrite"]) == 0
    assert np.load(tmp_path / "emb.npy").shape == (2, 64)


# -- (c) whole or not at all ----------------------------------------------------------------------------------------


def test_a_crash_in_the_middle_of_a_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write(target, '{"old": 1}')
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_path(target) as tmp, open(tmp, "w") as f:
            f.write('{"new": ')
            raise RuntimeError("crash")
    real_fsync = os.fsync

    def crash(fd):
        raise OSError(errno.EIO, "crash")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="crash"):
        atomic_write(target, '{"new": 2}')
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == '{"old": 1}' and tree(tmp_path) == ["summary.json"]
    atomic_write(target, '{"new": 2}')
    assert target.read_text() == '{"new": 2}' and tree(tmp_path) == ["summary.json"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_eval_results_and_a_recordio_set_survive_a_crash_in_the_middle(tmp_path, monkeypatch):
    import csv

    from elasticface.data import convert
    from elasticface.eval.run import write_results

    write_results([{"set": "lfw", "acc": 0.5}], str(tmp_path), {"weights": "old"})
    before = {name: (tmp_path / name).read_text() for name in ("results.json", "results.csv")}

    def crash(self, rows):
        raise RuntimeError("crash")

    with monkeypatch.context() as patch:
        patch.setattr(csv.DictWriter, "writerows", crash)
        with pytest.raises(RuntimeError, match="crash"):
            write_results([{"set": "lfw", "acc": 0.9}], str(tmp_path), {"weights": "new"})
    assert (tmp_path / "results.csv").read_text() == before["results.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "results.json"]

    faces = faces_folder(tmp_path / "faces", PEOPLE)
    out = tmp_path / "rec"
    convert.write_recordio(str(faces), str(out))
    old = {name: (out / name).read_bytes() for name in tree(out)}
    calls = []
    real = convert.prepare_image

    def crash_on_the_fifth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(convert, "prepare_image", crash_on_the_fifth)
    with pytest.raises(RuntimeError, match="crash"):
        convert.write_recordio(str(faces), str(out), overwrite=True)
    assert {name: (out / name).read_bytes() for name in tree(out)} == old  # the old set, whole; no temporaries
    shutil.rmtree(out)
    calls.clear()
    with pytest.raises(RuntimeError, match="crash"):
        convert.write_recordio(str(faces), str(out))
    assert tree(out) == [], "a new set cut by a crash leaves nothing, not a half train.rec"


def test_a_full_disk_while_saving_a_checkpoint_is_a_users_error(tmp_path, monkeypatch):
    """torch.save reports a failed write as a RuntimeError whose context is the OSError ENOSPC: it becomes
    DiskFull (a UserError and an OSError: one line naming the file), the temporary file goes, the previous
    checkpoint stays as it was (tests/test_faults_slow.py fills a real disk)."""
    from elasticface.checkpointing.atomic_save import AtomicCheckpointIO, DiskFull

    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, target)
    before = target.read_bytes()

    def full(*_args, **_kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos 704 vs 598") from None

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(DiskFull) as caught:
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, target)
    assert isinstance(caught.value, UserError) and isinstance(caught.value, OSError)
    assert caught.value.errno == errno.ENOSPC and one_line(caught.value).startswith(f"{target}: no space left")
    assert "previous last.ckpt kept whole" in str(caught.value) and "\n" not in str(caught.value)
    assert target.read_bytes() == before and tree(tmp_path) == ["last.ckpt"]
