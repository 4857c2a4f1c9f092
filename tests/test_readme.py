"""Every command of the README, of the documentation site and of `make help` runs as a user types it, from a
fresh working directory.

The commands are read from the ```bash blocks of README.md and of every page under docs/, and from
`make help`, never copied here, so a command added to the README or a docs page is tested without touching
this file; one this file does not know how to run fails `test_every_readme_command_is_classified`. What a
test may add is only what the page leaves to the user: `debug=tiny` (a long run made tiny), `--cfg job` for
commands that need a GPU, a cluster or data we cannot have (composition is still checked), the user's files
where the page names placeholders (`/data/...`, `faces/`, `pairs.txt`, `last.ckpt`, `ckpt_path=...`, `photos/`,
`a.jpg`, `pts.txt`, `model.pth`, `model.onnx`), a skip for `--device cuda` without a GPU, and the
venv's `python`. No `hydra.run.dir`/`hydra.sweep.dir`: outputs go where a user's would, under the
working directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

README = ROOT / "README.md"
#: the documentation site's pages (mkdocs.yml): their commands are tested like the README's
DOCS = ROOT / "docs"

#: commands that set up the environment the tests already run in, or that are the test suite itself
SKIP = {
    "source": "shell activation: the tests already run in the venv",
    "conda": "conda is not on the test machine; environment.yaml is checked against pyproject",
    "pip": "the package and its extras are installed by `make install` before the tests",
    "make test": "the test suite itself",
    "make test-all": "the test suite itself",
    "make test-slow": "the test suite itself",
    "make fuzz": "hours of fuzzing; tests/test_fuzz_readers.py runs the same properties at make test's size",
    "make test-matrix": "the test suite itself (under several thread counts, kernels and orders)",
    "make install": "ran before the tests",
    "make test-cluster": "the cluster tests themselves (tests/test_cluster.py against make slurm-up's cluster)",
    "make slurm-up": "starts SLURM's daemons as root: make test-cluster does; tests/test_cluster.py submits to them",
    "make slurm-down": "stops make slurm-up's daemons: make test-cluster does",
    "export": "shell state for the SLURM clients: make test-cluster sets SLURM_CONF for tests/test_cluster.py",
    "sinfo": "a SLURM client: tests/test_cluster.py runs it against make slurm-up's cluster",
    "squeue": "a SLURM client: tests/test_cluster.py runs it against make slurm-up's cluster",
    "scancel": "a SLURM client: tests/test_cluster.py cancels a job of a sweep with it",
    "make docs": "installs the docs extra and builds the site; CI runs it after the tests (.ci/run)",
    "curl": "a download (no network in the tests); tests/test_untrusted_files.py opens such files locally",
    "nvidia-smi": "needs an NVIDIA driver",
    "mlflow": "MLflow's UI, a server that runs until stopped; tests/test_mlflow.py starts `mlflow server` on a store "
    "and reads the runs back through MLflow's client",
    "git": "fetches public data over the network (docs/lfw.md: LFW's photos); no network in the tests",
    "cp": "copies the local config example; tests/test_local_config.py composes train and eval with that copy",
    "bash benchmarks/gpu_suite/run.sh": "tests/test_gpu_suite.py runs the page's `--device cpu` command and checks its "
    "figures; without `--device cpu` it needs a lent GPU and an arcface_torch checkout",
}
#: placeholders for public data the user fetches (LFW's and CFP's photos, insightface's y1 model): not ours to ship.
#: Their readers are tested on files in the same layouts (tests/test_lfw_pairs.py, tests/test_mxnet_zoo.py,
#: tests/test_lfw_split.py); the commands on them are classified here and skipped, naming the data.
FETCHED_DATA = ("lfw/", "lfw_aligned/", "cfp-dataset/", "LFW_PHOTOS", "data.val_root=bins",
                # the LFW and CFP splits made from those photos, and the benchmarks' sweep folders trained on them
                "lfw_split", "logs/lfw_fold10/", "logs/lfw_folds6_10/", "cfp_aligned/", "cfp_split",
                "logs/cfp_finetune/",
                # CFP's people at low resolution (elasticface-convert lowres of the aligned photos, docs/finetune.md)
                "cfp_lowres",
                # the MegaFace and TinyFace stand-ins built from LFW's aligned faces (docs/evaluation.md)
                "lfw_megaface", "lfw_16_32", "lfw_tinyface")
#: insightface's y1 as its zip unpacks: the test puts there the small y1 that MXNet itself wrote (tests/data/mxnet)
Y1_DIR = "model-y1-test2"
#: overrides that mean a command needs a GPU, a cluster or data that cannot exist here: composed with --cfg job
#: (`backbone=iresnet100`, or a job whose weights= is the released iresnet100: a Hydra job on it takes half an
#: hour of this CPU; its released file still loads for real in the embed command, see `released_backbone`)
NEEDS_MORE = ("trainer=gpu", "trainer=ddp", "launcher=slurm", "experiment=ms1mv2", "experiment=casia",
              "experiment=released/", "ijb.root=", "megaface.root=", "tinyface.root=", "backbone=iresnet100",
              "weights=295672backbone.pth")
#: the official ElasticFace release the README names: the test writes one in its layout (tests/helpers)
RELEASED = "295672backbone.pth"


def needs_more(tokens: list[str]) -> bool:
    return any(t == word or (word.endswith(("ms1mv2", "casia", "=", "/")) and t.startswith(word))
               for t in tokens for word in NEEDS_MORE)
#: size overrides appended where a command would take long (the README's values are real-run sizes)
SIZE = {"hparams_search=elastic_optuna": ["hydra.sweeper.n_trials=2"], "bench": ["SIZE=tiny"],
        # debug=tiny sets a 32-d embedding, which the toy example refuses: give it back its 2-D one
        "experiment=toy_2d": ["model.embedding_size=2"],
        "sweep-demo": ["ARGS=debug=tiny"]}
#: jobs of the sweeps that a README command starts (the rest are products of comma-separated values)
SWEEP_JOBS = {"hparams_search=paper_table1": 11, "hparams_search=paper_table2": 11, "sweep-demo": 11,
              "hparams_search=elastic_optuna": 2}
#: the commands that train and still run in the fast suite (`make test` stays under 5 minutes): the two
#: commands of the design card; every other command that trains, or that needs a trained checkpoint,
#: runs in the slow suite (`make test-slow`). Commands that do not train (`--cfg job`, help) run in both.
FAST_TRAINING = {"make train", "python train.py head=elastic_arc_plus sigma=0.0175"}
TRAINS = ("train.py", "elasticface-train", "make train", "make sweep-demo", "make report", "make bench", "eval.py",
          "elasticface.eval", "elasticface.data.convert", "elasticface-embed", "elasticface-export",
          "elasticface-convert", "elasticface-align", "elasticface-compare", "elasticface-toy-2d")


def fast(command: str) -> bool:
    if command in FAST_TRAINING:
        return True
    tokens = shlex.split(command)
    if needs_more(tokens) or "--cfg" in tokens or skip_reason(tokens):
        return True
    return not any(word in command for word in TRAINS)


def sweep_values(override: str) -> int:
    """How many values a `key=a,b,c` sweep override lists (commas inside [...] are one list value)."""
    if "=" not in override:
        return 1
    depth, count = 0, 1
    for char in override.split("=", 1)[1]:
        depth += {"[": 1, "]": -1}.get(char, 0)
        count += char == "," and depth == 0
    return count


def jobs(command: str) -> int:
    tokens = shlex.split(command)
    n = 1
    for token in tokens:
        n *= SWEEP_JOBS.get(token, 1) * (sweep_values(token) if "-m" in tokens else 1)
    return n


def documented_pages() -> list[Path]:
    """README.md and every Markdown page of the documentation site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def bash_commands(text: str) -> list[str]:
    """The commands of a page's ```bash blocks, one per line (continuation lines joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            tokens = shlex.split(line, comments=True)
            if tokens:
                commands.append(shlex.join(tokens))
    return commands


def readme_commands() -> list[str]:
    return [command for page in documented_pages() for command in bash_commands(page.read_text())]


def make_help_commands() -> list[str]:
    out = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "help"], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    # each line: `make TARGET [VAR=value ...]   description`
    lines = [line.strip() for line in out.stdout.splitlines()]
    return [re.split(r"\s{2,}", line)[0] for line in lines if line.startswith("make ")]


def skip_reason(tokens: list[str]) -> str | None:
    key = " ".join(tokens[:2]) if tokens[0] in ("make", "bash") else tokens[0]
    fetched = next((word for word in FETCHED_DATA for t in tokens if word in t), None)
    if fetched:
        return f"needs public data the user fetches ({fetched}: docs/lfw.md, docs/model_zoo.md)"
    return SKIP.get(key)


def plan(command: str, workdir: Path, ckpt: Path) -> list[str] | None:
    """The argv that runs `command` as a user would in `workdir`, or None if it is not ours to run."""
    tokens = shlex.split(command)
    if skip_reason(tokens):
        return None
    tokens = [t.replace("/data/", f"{workdir}/data/") for t in tokens]
    tokens = [re.sub(r"^(ckpt_path|weights)=(\.\.\.|.*<\.\.\.>.*)$", rf"\1={ckpt}", t) for t in tokens]
    tokens = [re.sub(r"^DIR=.*<time>.*$", f"DIR={workdir / 'sweep'}", t) for t in tokens]
    if tokens[0] == "make":
        argv = ["make", "-s", "-f", str(ROOT / "Makefile"), *tokens[1:]]
        if tokens[1] == "train":
            args = next((t for t in tokens if t.startswith("ARGS=")), "ARGS=")
            argv = [t for t in argv if not t.startswith("ARGS=")] + [f"{args} debug=tiny".replace("= ", "=")]
        return argv + SIZE.get(tokens[1], [])
    if tokens[0].startswith("elasticface-"):  # the installed console scripts, beside this python
        app = {"elasticface-train": "train.py", "elasticface-eval": "eval.py"}.get(tokens[0])
        argv = [str(Path(sys.executable).parent / tokens[0]), *tokens[1:]]
    elif tokens[0] == "python":
        app = tokens[1] if tokens[1] in ("train.py", "eval.py") else None
        argv = [sys.executable, str(ROOT / app), *tokens[2:]] if app else [sys.executable, *tokens[1:]]
    else:
        raise AssertionError(f"README command {command!r}: no rule to run it (tests/test_readme.py)")
    if app:  # a Hydra app
        if needs_more(tokens):  # Hydra refuses --cfg in a multirun: compose the job as a single run
            if "-m" in argv:  # one job of the sweep: the first value of each swept key
                argv = [first_sweep_value(t) for t in argv if t != "-m"] + ["hydra.mode=RUN"]
            return argv + (["--cfg", "job"] if "--cfg" not in argv else [])
        if app == "train.py" and "--cfg" not in argv and not any(t.startswith("debug=") for t in argv):
            argv.append("debug=tiny")
        for word, extra in SIZE.items():
            if word in tokens:
                argv += extra
    return argv


def first_sweep_value(token: str) -> str:
    """`head=arcface,elastic_arc` -> `head=arcface`; lists (`[a,b]`) and other tokens unchanged."""
    key, sep, value = token.partition("=")
    if not sep or value.startswith(("[", "{", "'", '"')) or "," not in value:
        return token
    return f"{key}={value.split(',')[0]}"


def fresh_workdir(user_files: tuple[Path, Path], tmp_path: Path) -> Path:
    base, ckpt = user_files
    for name in ("faces", "data"):
        shutil.copytree(base / name, tmp_path / name)
    shutil.copy(base / "pairs.txt", tmp_path / "pairs.txt")
    if ckpt.exists():
        shutil.copy(ckpt, tmp_path / "last.ckpt")
    (tmp_path / Y1_DIR).mkdir()
    for file in (ROOT / "tests" / "data" / "mxnet" / "y1").iterdir():
        (tmp_path / Y1_DIR / file.name).symlink_to(file)
    return tmp_path


@pytest.fixture(scope="session")
def released_backbone(tmp_path_factory) -> Path:
    """`295672backbone.pth` as the official ElasticFace iresnet100 is released: a plain state_dict in its layout,
    written from the architecture's description (random values), not saved from this project's model."""
    import torch

    from helpers.insightface_layout import IRESNET_BLOCKS, iresnet_layout, released_state_dict

    path = tmp_path_factory.mktemp("released") / RELEASED
    torch.save(released_state_dict(iresnet_layout(IRESNET_BLOCKS["iresnet100"])), path)
    return path


#: what docs/align.md and the compare/embed commands leave to the user: their photos (a folder, and two photos
#: of one face), insightface-format landmarks, a released backbone file and its ONNX export, each with the
#: thresholds eval.py stored in its run folder (logs/eval). Given to the commands that name the photos (not to
#: an export that writes its own model.onnx)
PHOTO_FILES = ("photos/", "a.jpg", "model.pt")  # "model.pt" also matches model.pth


@pytest.fixture(scope="session")
def user_photos(user_files, tmp_path_factory) -> Path:
    """A folder holding `photos/` (a real face photo, skimage's astronaut, as JPEG), `a.jpg` and `b.jpg` (that
    photo and a shifted, scaled crop of it), `pts.txt` (the photos' 5 points as insightface's text format, from
    the detector the align command runs), `model.pth` (a mobilefacenet state_dict in insightface's layout,
    written from its description), `model.onnx` and `model.pt` (`elasticface-export` of it to ONNX and to
    TorchScript), the first two with the
    `<weights>.thresholds.json` that `python eval.py weights=... data.val_root=...` writes beside it."""
    import torch
    from PIL import Image
    from skimage import data

    from elasticface.align.detector import MTCNNDetector
    from elasticface.eval.embed import load_model_file
    from elasticface.export.check import example_input
    from helpers.insightface_layout import mobilefacenet_layout, released_state_dict

    base = tmp_path_factory.mktemp("user_photos")
    photo = data.astronaut()  # 512x512 RGB, one face
    (base / "photos").mkdir()
    Image.fromarray(photo).save(base / "photos" / "astronaut.jpg", quality=95)
    Image.fromarray(photo).save(base / "a.jpg", quality=95)
    crop = Image.fromarray(photo[20:340, 60:380]).resize((400, 400), Image.BILINEAR)
    crop.save(base / "b.jpg", quality=90)
    faces = MTCNNDetector("cpu").detect([np.asarray(Image.open(base / "photos" / "astronaut.jpg").convert("RGB"))])[0]
    assert faces, "the detector finds the astronaut's face"
    best = max(faces, key=lambda f: f.score)
    points = " ".join(f"{v:.2f}" for v in best.landmarks.reshape(-1))
    (base / "pts.txt").write_text(f"astronaut.jpg {points} {best.score:.4f}\n")
    # random values grow through mobilefacenet's 30-odd layers to embeddings of ~1e5 where a trained one's are ~10:
    # scale its embedding layer to that, so the export check's absolute tolerance means what it does for a real model
    state = released_state_dict(mobilefacenet_layout())
    torch.save(state, base / "model.pth")
    model = load_model_file(str(base / "model.pth"), torch.device("cpu"), None, None, False)
    with torch.no_grad():
        scale = float(model(example_input(2, 112, 0)).abs().max())
    state["features.layers.2.weight"] *= 10.0 / scale
    torch.save(state, base / "model.pth")
    scripts = Path(sys.executable).parent
    for out in ("model.onnx", "model.pt"):
        export = subprocess.run([str(scripts / "elasticface-export"), "--weights", "model.pth", "--out", out,
                                 "--format", "torchscript" if out.endswith(".pt") else "onnx"],
                                cwd=base, capture_output=True, text=True, timeout=600)
        assert export.returncode == 0, export.stdout[-2000:] + export.stderr[-3000:]
    env = {**os.environ, "WANDB_MODE": "offline"}
    for weights in ("model.pth", "model.onnx"):
        out = subprocess.run([sys.executable, str(ROOT / "eval.py"), f"weights={weights}",
                              f"data.val_root={user_files[0] / 'data' / 'faces_emore'}"],
                             cwd=base, capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        assert not (base / f"{weights}.thresholds.json").exists(), f"eval.py writes nothing beside {weights}"
    stored = sorted(json.loads(p.read_text())["weights"] for p in (base / "logs" / "eval").rglob("thresholds.json"))
    assert stored == [str(base / "model.onnx"), str(base / "model.pth")], "each eval run stores its thresholds"
    return base


def add_user_photos(base: Path, workdir: Path) -> None:
    shutil.copytree(base / "photos", workdir / "photos")
    for name in ("a.jpg", "b.jpg", "pts.txt", "model.pth", "model.onnx", "model.pt"):
        shutil.copy(base / name, workdir / name)
    shutil.copytree(base / "logs" / "eval", workdir / "logs" / "eval", dirs_exist_ok=True)  # the thresholds


ALL = sorted(set(readme_commands()) | set(make_help_commands()))


def _param(command: str):
    return pytest.param(command, marks=[] if fast(command) else [pytest.mark.slow])


def test_every_readme_command_is_classified(tmp_path):
    """A README command this file has no rule for fails here, instead of silently going untested."""
    assert len(ALL) >= 10
    for command in ALL:
        plan(command, tmp_path, tmp_path / "last.ckpt")


def test_docs_pages_commands_are_collected():
    """The docs pages' commands are among those run here, not only the README's."""
    docs_only = {c for page in sorted(DOCS.rglob("*.md")) for c in bash_commands(page.read_text())}
    docs_only -= set(bash_commands(README.read_text()))
    assert len(docs_only) >= 10, sorted(docs_only)
    assert docs_only <= set(ALL)
    text = ("# a page\n\n```bash\npython train.py \\\n    head=arcface   # a comment\n```\n\n"
            "```text\nnot a command\n```\n")
    assert bash_commands(text) == ["python train.py head=arcface"]


def test_job_counts_of_readme_sweeps():
    assert jobs("python train.py -m head=elastic_arc,elastic_arc_plus sigma=0.0125,0.0175,0.025,0.05") == 8
    assert jobs("python train.py -m hparams_search=paper_table2 seed=1,2,3 data.val_sets.names=[pose,hard]") == 33
    assert jobs("python train.py head=cosface data.val_sets.names=[pose,hard]") == 1


@pytest.mark.parametrize("command", [_param(c) for c in ALL])
def test_readme_command_runs_verbatim(command, user_files, tmp_path, request):
    tokens = shlex.split(command)
    if skip_reason(tokens):  # before any preparation (a sweep for a report command takes seconds)
        pytest.skip(f"{command}: {skip_reason(tokens)}")
    loads_model = "last.ckpt" in command or re.search(r"(ckpt_path|weights)=\.\.\.|ckpt_path=", command)
    if loads_model and not needs_more(tokens):
        request.getfixturevalue("user_checkpoint")  # a trained model, for the commands that load one
    workdir = fresh_workdir(user_files, tmp_path)
    if "--device" in tokens and tokens[tokens.index("--device") + 1].startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"{command}: needs a CUDA GPU (the same command on the CPU runs above)")
    if any(word in command for word in PHOTO_FILES):
        add_user_photos(request.getfixturevalue("user_photos"), workdir)
    if RELEASED in command and not needs_more(tokens):
        (workdir / RELEASED).symlink_to(request.getfixturevalue("released_backbone"))
    if "<time>" in command:  # `make report DIR=<a sweep>`: the user's sweep is a small one of their own
        sweep = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "head=arcface,elastic_arc", "debug=tiny",
                                "trainer.max_steps=2"],
                               cwd=workdir, capture_output=True, text=True, timeout=900)
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        (workdir / "logs" / "train" / "multiruns").iterdir().__next__().rename(workdir / "sweep")
    if "elasticface-toy-2d" in command:  # the toy example's summary reads the user's toy sweep: a tiny one
        sweep = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "experiment=toy_2d",
                                "head=arcface,elastic_arc", "seed=1,2", "debug=tiny", "model.embedding_size=2",
                                "trainer.max_steps=2"],
                               cwd=workdir, capture_output=True, text=True, timeout=900)
        assert sweep.returncode == 0, sweep.stderr[-3000:]
    argv = plan(command, workdir, user_files[1])
    if argv is None:
        pytest.skip(f"{command}: {skip_reason(shlex.split(command))}")
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    out = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, f"{command}\n{shlex.join(argv)}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    if "train.py" in command and "--cfg" not in argv:
        summaries = [*workdir.glob("logs/*/*/*/summary.json"), *workdir.glob("logs/*/multiruns/*/*/summary.json")]
        assert summaries, "a training command writes summary.json under ./logs"
