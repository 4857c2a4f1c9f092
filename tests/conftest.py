"""Shared fixtures: composed Hydra configs for tiny, fast CPU runs."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from elasticface.cli.compose import compose_train  # noqa: F401  (the tests import it from here)
from elasticface.cli.resolvers import register_config_code
from elasticface.utils.threads import ThreadChoice, choose_threads

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
register_config_code()

# Small enough that a full fit (train + verification) takes seconds on 2 CPU cores.
TINY = ["debug=tiny"]


def compose_eval(overrides: list[str]) -> DictConfig:
    """The config `python eval.py <overrides>` runs, composed in-process."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
        return compose(config_name="eval", overrides=overrides)


@pytest.fixture
def tiny_cfg(tmp_path):
    def make(*overrides: str) -> DictConfig:
        return compose_train(TINY + list(overrides), tmp_path)

    return make


def _test_threads() -> ThreadChoice:
    """Torch threads per test process, chosen once at start-up (before any test sets OMP_NUM_THREADS): the
    project's rule (elasticface.utils.threads) with the xdist workers as the processes sharing the cores, and at
    most 2 (the tests' tensors are small). 2 workers with 2 threads each on 2 cores ran a 3,000-step toy run 30x
    slower: every parallel op waits for a descheduled thread."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    choice = choose_threads(processes=workers, setting="tests")
    return ThreadChoice(min(2, choice.threads), choice.reason)


TEST_THREADS = _test_threads()
# from the start, not only per test: session- and module-scoped fixtures run before `_same_start_for_every_test`,
# and a reference run they start must use the thread count of the runs it is compared with (bit for bit)
os.environ["OMP_NUM_THREADS"] = str(TEST_THREADS.threads)
torch.set_num_threads(TEST_THREADS.threads)


def pytest_report_header(config) -> str:
    return f"torch threads per test process: {TEST_THREADS.threads} ({TEST_THREADS.reason})"


@pytest.fixture(autouse=True, scope="session")
def _mlflow_store_of_the_session(tmp_path_factory):
    """logger=mlflow (and many) write to the project's logs/mlflow unless MLFLOW_TRACKING_URI says otherwise: the
    tests' runs write to a store of their own (configs/logger/mlflow.yaml)."""
    os.environ.setdefault("MLFLOW_TRACKING_URI", str(tmp_path_factory.mktemp("mlflow")))


@pytest.fixture(autouse=True)
def _same_start_for_every_test():
    """Every test starts from the same process state whatever ran before it (`make test-matrix` runs the tests
    in a random order): the thread count and OMP_NUM_THREADS (for the commands a test starts; an in-process
    training run sets trainer.threads), the environment (Lightning's seed_everything sets PL_GLOBAL_SEED and
    PL_SEED_WORKERS, which later Trainers read), and the global random states a test may draw from unseeded."""
    environ = dict(os.environ)
    torch.set_num_threads(TEST_THREADS.threads)
    os.environ["OMP_NUM_THREADS"] = str(TEST_THREADS.threads)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="session")
def user_files(tmp_path_factory) -> tuple[Path, Path]:
    """The files a user brings, in their real layouts: an image folder `faces/` (one folder per identity),
    `pairs.txt` ('path1 path2 0|1'), and under `data/`: the folder again (`my_faces`, with `pairs.txt` of the
    same faces under other people's names in `held_out/`),
    an insightface RecordIO set with the paper's five `.bin` benchmarks (`faces_emore`). Returns (the folder
    holding them, where `user_checkpoint` puts a trained `last.ckpt`)."""

    from PIL import Image

    from elasticface.data.convert import pairs_to_bin, write_recordio
    from elasticface.data.synthetic import SyntheticFaces

    base = tmp_path_factory.mktemp("user_files")
    faces = base / "faces"
    dataset = SyntheticFaces(num_identities=4, images_per_identity=6, seed=0)
    for i in range(len(dataset)):
        image, label = dataset[i]
        folder = faces / f"id{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(folder / f"{i}.jpg", quality=95)
    images = sorted(p.relative_to(faces).as_posix() for p in faces.rglob("*.jpg"))
    same = lambda a, b: int(a.split("/")[0] == b.split("/")[0])  # noqa: E731
    pairs = [(images[i], images[i + 1], same(images[i], images[i + 1])) for i in range(len(images) - 1)]
    (base / "pairs.txt").write_text("".join(f"{a} {b} {s}\n" for a, b, s in pairs))
    data = base / "data"
    shutil.copytree(faces, data / "my_faces")
    # its pairs are of other people (verification is on people never trained on): the same faces under other names
    for person in sorted(p.name for p in faces.iterdir()):
        shutil.copytree(faces / person, data / "held_out" / f"held_{person}")
    (data / "pairs.txt").write_text("".join(f"held_out/held_{a} held_out/held_{b} {s}\n" for a, b, s in pairs))
    write_recordio(str(faces), str(data / "faces_emore"))
    for name in ("lfw", "cfp_fp", "agedb_30", "calfw", "cplfw"):  # the paper's five benchmarks
        pairs_to_bin(str(base / "pairs.txt"), str(faces), str(data / "faces_emore" / f"{name}.bin"))
    return base, base / "last.ckpt"


@pytest.fixture(scope="session")
def user_checkpoint(user_files) -> Path:
    """`last.ckpt` beside the user's files: a tiny model trained by `python train.py debug=tiny`."""
    import subprocess
    import sys

    base, ckpt = user_files
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=tiny", "trainer.max_epochs=1"], cwd=base,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    shutil.copy(next(base.glob("logs/train/runs/*/checkpoints/last.ckpt")), ckpt)
    return ckpt
