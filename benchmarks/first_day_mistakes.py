"""The first-day mistakes, typed as a new user types them, counted: how many end in ONE line on stderr naming the
file or key (exit status 2, no traceback, no Hydra hint, no run folder), within the time the command's `--help`
takes plus a few seconds.

    python benchmarks/first_day_mistakes.py            # every mistake, each a process from a fresh folder
    python benchmarks/first_day_mistakes.py --only eval

The lists are docs/security.md's ("A user's mistakes"); tests/test_config_checks.py runs the train and eval ones
in-process on every `make test`. Each row prints the command, the seconds against `--help`'s, and the line.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
Y1 = ROOT / "tests" / "data" / "mxnet" / "y1" / "model-0000.params"
#: seconds a mistake may take beyond the command's --help
GRACE = 5.0

# (arguments, what the one line must match after "<command>: error: ")
TRAIN_MISTAKES = [
    (["weights=notes.txt"], r"^weights=notes\.txt: not a model file \(text starting 'hello world"),
    (["weights=face.jpg"], r"^weights=face\.jpg: not a model file \(an image\)"),
    (["weights=missing.pth"], r"^weights=missing\.pth: no such file or folder"),
    (["weights=empty"], r"^weights=empty: a folder, not a model file"),
    (["ckpt_path=notes.txt"], r"^ckpt_path=notes\.txt: not a model file"),
    (["data=recordio"], r"^data\.root: this config needs a value"),
    (["data=recordio", "data.root=nowhere"], r"^data\.root=nowhere: no such file or folder .* RecordIO folder"),
    (["data=recordio", "data.root=empty"], r"^data\.root=empty: no train\.rec and no train\.idx"),
    (["data=folder", "data.root=notes.txt"], r"^data\.root=notes\.txt: a file, not a folder"),
    (["data=folder", "data.root=people"], r"^data\.root=people: 1 folders, and no image"),
    (["data=folder", "data.root=empty"], r"^data\.root=empty: no person folders"),
    (["trainer.max_epoch=3"], r"^trainer\.max_epoch: no such key; did you mean trainer\.max_epochs"),
    (["trainer.max_epoch=3", "data.batch_sise=8"],
     r"^trainer\.max_epoch: no such key; did you mean trainer\.max_epochs.* \| data\.batch_sise: no such key; "
     r"did you mean data\.batch_size"),
    (["head=elastic_ar"], r"^head=elastic_ar: no such option \(did you mean elastic_arc\?\); the options: .*arcface"),
    (["backbone=iresnet5O"], r"^backbone=iresnet5O: no such option \(did you mean iresnet50\?\)"),
    (["logger=null"], r"^logger=null: a config group takes an option; logger=\[\] or ~logger chooses none"),
    (["logger=[csv,tensorbord]"], r"^logger=tensorbord: no such option \(did you mean tensorboard\?\)"),
    (["trainer.max_epochs=0"], r"^trainer\.max_epochs=0: out of range; expected an integer >= 1"),
    (["data.batch_size=-1"], r"^data\.batch_size=-1: out of range"),
    (["data.batch_size=abc"], r"^data\.batch_size='abc': expected an integer >= 1"),
    (["sigma=-1"], r"^sigma=-1: out of range; expected a number >= 0"),
    (["optimizer.lr=abc"], r"^optimizer\.lr='abc': expected a number > 0$"),
    (["optimizer.lr=0"], r"^optimizer\.lr=0: out of range"),
    (["trainer.devices=two"], r"^trainer\.devices='two': expected an integer >= 1, or auto, -1"),
    (["trainer.precision=17"], r"^trainer\.precision=17: expected one of"),
    (["seed=-3"], r"^seed=-3: out of range"),
    (["finetune.wise_alpha=2"], r"^finetune\.wise_alpha=2: out of range; expected a number >= 0 and <= 1"),
    (["finetune=recipe"], r"^finetune=recipe fine-tunes loaded weights, but no weights= names the file"),
    (["finetune.wise_alpha=0.9"], r"^finetune\.wise_alpha=0\.9 mixes the weights it was loaded from .* no weights="),
    (["resume=yes"], r"^resume='yes': expected one of null, auto"),
    (["-m", "sigma=0.05,-1"], r"^sigma=-1: out of range"),
    (["trainer.max_epochs=[1"], r"^cannot read the command line"),
    (["-m", "seed=1,2", "--cfg", "job"], r"^-m and --cfg together: Hydra takes one of -m, --cfg, --info at a time"),
    (["halving.eta=2"], r"^halving\.eta=2: successive halving ranks the jobs of a sweep; add -m"),
    (["-m", "seed=1,2", "halving.eta=1"], r"^halving\.eta=1: out of range; expected an integer >= 2"),
    (["-m", "seed=1,2", "halving.eta=2,3"], r"^halving\.eta: takes one value per sweep"),
    (["-m", "seed=1,2", "halving.eta=2", "halving.first_epochs=8"],
     r"^halving\.first_epochs=8: not shorter than the full run \(trainer\.max_epochs=3\)"),
    (["-m", "seed=1,2", "halving.eta=2", "halving.metric=val/lfw/acc"], r"^halving\.metric=val/lfw/acc: no validation "
     r"set 'lfw'; the sets: synthetic"),
    (["-m", "hparams_search=elastic_optuna", "halving.eta=2"],
     r"^halving\.eta=2: this sweep's sweeper \(OptunaSweeper\) runs its own trials, not halving rounds"),
    (["-m", "hparams_search=elastic_optuna", "hydra/sweeper/pruner=medain"],
     r"^hydra/sweeper/pruner=medain: no such option \(did you mean median\?\); the options: "),
    (["-m", "hparams_search=elastic_optuna", "hydra/sweeper/pruner=threshold", "hydra.sweeper.pruner.lowr=0.9"],
     r"^hydra\.sweeper\.pruner\.lowr: no such key; did you mean hydra\.sweeper\.pruner\.lower"),
]

#: found once the job has started (torch imported, a head or backbone built, nothing read): the run folder is
#: left, holding failed.json with the same line
TRAIN_JOB_MISTAKES = [
    (["debug=tiny", "model.backbone.name=iresnet_tiny_typo"], r"^Unknown backbone 'iresnet_tiny_typo'\. Did you mean"),
    (["debug=tiny", "head=arcface", "m=4"], r"^m=4: must be in \[0, 1\.5708\) \(radians\)"),
    (["debug=tiny", "head=elastic_arc_plus", "model.head.plus_assignment=random"],
     r"^plus_assignment='random': must be one of \['paper', 'official'\]"),
    (["debug=tiny", "optuna_trial=3"], r"^optuna_trial=3: the Optuna sweeper sets it for each of its jobs"),
]

EVAL_MISTAKES = [
    (["weights=notes.txt", "data.val_root=bins"], r"^weights=notes\.txt: not a model file"),
    ([f"weights={Y1}"], r"^nothing to evaluate: set one of data\.val_root=\.\.\."),
    (["data.val_root=empty"], r"^data\.val_root=empty: no \.bin verification set in this folder"),
    (["data.val_root=bins"], r"^weights: no model file; give weights=<file>"),
    (["data.val_root=nowhere", f"weights={Y1}"], r"^data\.val_root=nowhere: no such file or folder"),
    ([f"weights={Y1}", "data.val_root=notabin"], r"^data\.val_root: notabin/lfw\.bin: not an insightface \.bin set"),
    ([f"weights={Y1}", "megaface.root=nowhere"], r"^megaface\.root=nowhere: no such file or folder"),
    ([f"weights={Y1}", "megaface.root=empty"], r"^megaface\.root=empty: no facescrub_images, megaface_images"),
    ([f"weights={Y1}", "megaface.root=pack", "megaface.sizes=[abc]"],
     r"^megaface\.sizes=\['abc'\]: 'abc' is not an integer >= 1"),
    ([f"weights={Y1}", "tinyface.root=empty"],
     r"^tinyface\.root=empty: no Probe/, Gallery_Match/, Gallery_Distractor/ there"),
    ([f"weights={Y1}", "tinyface.root=pack/tinyface"], r"pack/tinyface/Gallery_Distractor: no images"),
    ([f"weights={Y1}", "ijb.root=empty"], r"^ijb\.root=empty: no meta/ folder"),
    ([f"weights={Y1}", "ijb.root=pack/ijb", "ijb.protocol=1:n"],
     r"^ijb\.protocol='1:n': expected one of 1v1, 1n, both"),
    ([f"weights={Y1}", "pairs_file=notes.txt"], r"^pairs_file= needs image_root="),
    ([f"weights={Y1}", "pairs_file=empty", "image_root=."], r"^pairs_file=empty: a folder; expected a text file"),
    (["data.val_root=bins", "weights=face.jpg"], r"^weights=face\.jpg: not a model file"),
    (["megafac.root=x"], r"^megafac\.root: no such key; did you mean megaface\.root"),
    ([f"weights={Y1}", "data.val_root=bins", "far_target=2"], r"^far_target=2: out of range"),
    ([f"weights={Y1}", "data.val_root=bins", "num_folds=1"], r"^num_folds=1: out of range"),
    ([f"weights={Y1}", "data.val_root=bins", "--info", "--cfg=job"], r"^--info and --cfg together"),
]

#: the file commands: (module, arguments, what the line must match)
TOOL_MISTAKES = [
    ("megaface_pack", ["nowhere", "out"], r"nowhere"),
    ("megaface_pack", ["people", "pack"], r"^people: no <person>/<image> folders"),
    ("tinyface_pack", ["people", "pack"], r"^people: no <person>/<image> folders"),
    ("convert", ["folder2rec", "nowhere", "out"], r"nowhere"),
    ("convert", ["pairs2bin", "notes.txt", "people", "out.bin"], r"notes\.txt"),
    ("embed", ["--weights", "notes.txt", "--images", "people", "--out", "e.npy"], r"notes\.txt"),
    ("export", ["--weights", "notes.txt", "--out", "m.onnx"], r"notes\.txt"),
    ("compare", ["a.jpg", "b.jpg", "weights=notes.txt"], r"a\.jpg|notes\.txt"),
    ("report", ["nowhere"], r"nowhere"),
    ("align", ["nowhere", "faces"], r"nowhere"),
    ("lfw_split", ["nowhere", "notes.txt", "out"], r"nowhere"),
]


def make_workdir(path: Path) -> Path:
    """The files a new user has at hand: a text file, an image header, folders empty and half-filled, a folder of
    .bin sets, a testpack's and an IJB folder's names."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "notes.txt").write_text("hello world\n")
    (path / "face.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(64))
    (path / "empty").mkdir()
    (path / "people" / "alice").mkdir(parents=True)
    (path / "bins").mkdir()
    (path / "bins" / "lfw.bin").write_bytes(b"\x80\x04" + bytes(8))
    (path / "notabin").mkdir()
    (path / "notabin" / "lfw.bin").write_text("not a pickle")
    for name in ("facescrub_images", "megaface_images", "ijb/IJBC/meta"):
        (path / "pack" / name).mkdir(parents=True)
    for name in ("facescrub_lst", "megaface_lst"):
        (path / "pack" / name).write_text("")
    for name in ("Probe/1_1.jpg", "Gallery_Match/1_2.jpg"):  # a TinyFace split whose distractors are missing
        (path / "pack" / "tinyface" / name).parent.mkdir(parents=True, exist_ok=True)
        (path / "pack" / "tinyface" / name).write_bytes((path / "face.jpg").read_bytes())
    (path / "pack" / "tinyface" / "Gallery_Distractor").mkdir()
    return path


def run(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    return out, time.perf_counter() - started


def judge(out: subprocess.CompletedProcess, pattern: str, prog: str, cwd: Path, in_job: bool = False) -> str:
    """'' when the mistake ended as the contract says, else what was wrong; `in_job`: found after the job started,
    so its run folder says it failed."""
    lines = out.stderr.strip().splitlines()
    if out.returncode != 2:
        return f"exit {out.returncode}"
    if len(lines) != 1 or "Traceback" in out.stderr or "HYDRA_FULL_ERROR" in out.stderr + out.stdout:
        return f"{len(lines)} lines on stderr"
    if not re.search(pattern, lines[0].removeprefix(f"{prog}: error: ")):
        return "the line does not name it"
    if in_job:
        return "" if list(cwd.glob("logs/*/runs/*/failed.json")) else "its run folder does not say it failed"
    if (cwd / "logs").exists():
        return "left a run folder"
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("train", "eval", "tools"))
    args = parser.parse_args()
    cases = []
    if args.only in (None, "train"):
        cases += [("elasticface-train", [str(ROOT / "train.py"), *a], p) for a, p in TRAIN_MISTAKES]
        cases += [("elasticface-train", [str(ROOT / "train.py"), *a], p, True) for a, p in TRAIN_JOB_MISTAKES]
    if args.only in (None, "eval"):
        cases += [("elasticface-eval", [str(ROOT / "eval.py"), *a], p) for a, p in EVAL_MISTAKES]
    if args.only in (None, "tools"):
        cases += [(f"elasticface-{m.replace('_', '-')}", ["-m", f"elasticface.cli.{m}", *a], p)
                  for m, a, p in TOOL_MISTAKES]
    helps: dict[str, float] = {}
    good = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (prog, argv, pattern, *in_job) in enumerate(cases):
            cwd = make_workdir(Path(tmp) / str(i))
            if prog not in helps:
                helps[prog] = run([*(argv[:2] if argv[0] == "-m" else argv[:1]), "--help"], cwd)[1]
            out, seconds = run(argv, cwd)
            problem = judge(out, pattern, prog, cwd, bool(in_job))
            if not problem and not in_job and seconds > helps[prog] + GRACE:
                problem = f"{seconds:.1f} s, --help {helps[prog]:.1f} s"
            good += not problem
            line = (out.stderr.strip().splitlines() or [""])[-1][:150]
            print(f"{'ok  ' if not problem else 'FAIL'} {seconds:5.1f} s (--help {helps[prog]:4.1f} s)  "
                  f"{prog} {' '.join(argv[1:] if argv[0] != '-m' else argv[2:])}\n      {problem or line}")
    print(f"{good} of {len(cases)} mistakes ended in one line naming the file or key, exit 2, within --help + "
          f"{GRACE:g} s")
    return 0 if good == len(cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
