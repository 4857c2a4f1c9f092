"""Every option of every config group trains at tiny size, as `python train.py GROUP=OPTION debug=tiny`.

The options are read from configs/, so a new option is tested without touching this file. Options that
need a GPU or a cluster are composed with `--cfg job` (all that can be checked here); options that
need data get the user's files in their real layouts (tests/conftest.py `user_files`). A sweep option
starts a real multirun in a fresh working directory, without hydra.run.dir/sweep.dir; a single run goes
through the same job in this process. The fast suite keeps the options users tripped on (see FAST);
every option runs in the slow suite (`make test-slow`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from conftest import CONFIG_DIR, ROOT, compose_train
from elasticface.cli.help import group_options
from elasticface.training import run

#: groups whose options are Hydra internals rather than user choices (`_shared`: the bases other options compose)
INTERNAL = {"hydra", "paths", "extras", "local", "_shared"}
#: options that need hardware or a scheduler we do not have: composed only
CFG_ONLY = {("trainer", "gpu"), ("trainer", "ddp"), ("launcher", "slurm")}
#: experiments that are the paper's GPU recipes
GPU_RECIPES = ("ms1mv2_r100", "casia_r50")
#: options that start processes of their own (Lightning's DDP re-runs the command): run as a command
PROCESSES = {("trainer", "ddp_cpu")}
#: insightface's y1 as released (its MXNet file): the weights the fine-tuning recipe starts from
Y1 = ROOT / "tests" / "data" / "mxnet" / "y1" / "model-0000.params"
#: the user's data each data option reads (relative to the user_files folder)
DATA = {"recordio": ["data.root={base}/data/faces_emore"],
        "folder": ["data.root={base}/data/my_faces", "data.val_sets.pairs_file={base}/data/pairs.txt"],
        "folder_bin": ["data.root={base}/data/my_faces", "data.val_root={base}/data/faces_emore"]}
#: options that need photos the tests do not have (LFW's): composed only (tests/test_lfw_split.py builds
#: a synthetic split and its data module; tests/test_paper_grids.py composes the sweep's jobs)
NEEDS_PHOTOS = {("experiment", "lfw_fold10"): ["data.root={base}/data/lfw_split"],
                ("experiment", "lfw_folds6_10"): ["data.root={base}/data/lfw_split_6_10"],
                ("hparams_search", "lfw_fold10"): ["data.root={base}/data/lfw_split"],
                ("hparams_search", "lfw_fold10_remedies"): ["data.root={base}/data/lfw_split"],
                ("hparams_search", "lfw_folds6_10"): ["data.root={base}/data/lfw_split_6_10"],
                ("experiment", "lfw_y1_finetune"): ["data.root={base}/data/lfw_split",
                                                    "weights={base}/model-y1-test2/model-0000.params"],
                ("experiment", "cfp_finetune"): ["data.root={base}/data/cfp_split",
                                                 "weights={base}/model-y1-test2/model-0000.params"],
                ("hparams_search", "cfp_finetune"): ["data.root={base}/data/cfp_split",
                                                     "weights={base}/model-y1-test2/model-0000.params"]}
#: a row of the fine-tuning table: the CFP split and y1's files (tests/test_finetune.py trains each part)
NEEDS_PHOTOS |= {("finetune_row", row): ["experiment=cfp_finetune", *NEEDS_PHOTOS["experiment", "cfp_finetune"]]
                 for row in ("plain", "imprint", "head_only", "lr_scale", "frozen_bn", "l2sp")}


def options() -> list[tuple[str, str]]:
    """Every (group, option): the folders of configs/ and the groups registered in code (head, from the registry)."""
    registered = {g for g, v in ConfigStore.instance().repo.items() if isinstance(v, dict)}
    groups = {p.name for p in Path(CONFIG_DIR).iterdir() if p.is_dir()} | registered
    return [(group, option) for group in sorted(groups - INTERNAL - {"hydra"}) for option in group_options(group)]


#: what the fast suite runs: the groups users tripped on (debug modes, data, model), the GPU and cluster
#: options (composed), and the CPU trainer; the default of every group is what the other tests train with
FAST = {("debug", "fdr"), ("debug", "tiny"), ("debug", "default"), ("data", "folder"), ("data", "recordio"),
        ("model", "partial_fc"), ("model", "model_parallel"), ("trainer", "cpu"),
        ("experiment", "sweep_demo")} | CFG_ONLY


def marks(group: str, option: str) -> list:
    return [] if (group, option) in FAST else [pytest.mark.slow]


def command(group: str, option: str, base: Path) -> list[str]:
    # recipe_head/<recipe>_<head> is not chosen by name: `recipe=released head=arcface` applies it
    args = [f"recipe={option.split('_', 1)[0]}", f"head={option.split('_', 1)[1]}"] if group == "recipe_head" \
        else [f"{group}={option}"]
    if group == "experiment" and option.startswith(GPU_RECIPES):
        # the paper's recipes: iresnet50/100 on 4 GPUs and a real RecordIO set (their tiny CPU run is killed
        # for memory on a 2-core test machine); composed, as the README test does for them
        return args + [a.format(base=base) for a in DATA["recordio"]] + ["--cfg", "job"]
    if (group, option) in NEEDS_PHOTOS:
        return args + [a.format(base=base) for a in NEEDS_PHOTOS[group, option]] + ["--cfg", "job"]
    if group == "data":
        args += [a.format(base=base) for a in DATA.get(option, [])]
    if (group, option) in CFG_ONLY:
        return args + ["--cfg", "job"]
    if group == "debug":
        # each debug mode is its own size; the tiny data sizes keep the default synthetic set small
        return args + ([] if option == "tiny" else ["data.train_dataset.num_identities=8",
                                                      "data.val_sets.num_pairs=40", "data.val_sets.num_identities=10"])
    args.append("debug=tiny")
    if (group, option) == ("finetune", "recipe"):  # the recipe fine-tunes loaded weights: y1's MXNet file
        args.append(f"weights={Y1}")
    if (group, option) == ("experiment", "toy_2d"):  # debug=tiny's 32-d embedding, which the toy refuses
        args.append("model.embedding_size=2")
    if group in ("hparams_search", "launcher"):
        args = ["-m", *args] + (["hydra.sweeper.n_trials=2"] if option.endswith("optuna") else [])
    return args


def test_every_group_has_options():
    groups = {g for g, _ in options()}
    assert {"head", "backbone", "data", "model", "optimizer", "scheduler", "trainer", "logger", "callbacks",
            "debug", "experiment", "hparams_search", "launcher"} <= groups


@pytest.mark.parametrize("group,option", [pytest.param(g, o, marks=marks(g, o)) for g, o in options()])
def test_option_trains_at_tiny_size(group, option, user_files, tmp_path):
    base, _ = user_files
    args = command(group, option, base)
    if "--cfg" in args:  # what `--cfg job` checks: the option composes and resolves
        cfg = compose_train([a for a in args if a not in ("--cfg", "job")], tmp_path)
        OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
        assert cfg.hydra.runtime.choices[group if group != "recipe_head" else "recipe_head@model.head"] == option
        return
    if args[0] == "-m" or (group, option) in PROCESSES:  # a sweep or DDP: the real command, as the user starts it
        env = {**os.environ, "WANDB_MODE": "offline"}
        out = subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, capture_output=True,
                             text=True, timeout=1200, env=env)
        assert out.returncode == 0, f"{args}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        assert list(tmp_path.glob("logs/**/summary.json")), f"{args}: no job wrote summary.json"
        return
    # one run, in this process (the same job train.py runs; a process per option would double the time)
    cfg = compose_train(args, tmp_path)
    if group == "recipe_head":
        assert cfg.hydra.runtime.choices["recipe_head@model.head"] == option
    try:
        run(cfg)
    finally:  # what Hydra's job-end callback does after a job: the next run must not reuse this W&B run
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None:
            wandb.run.finish()
    assert (tmp_path / "summary.json").exists(), f"{args}: no summary.json"
