"""hparams_search=paper_table1/2 expand to exactly the paper's 11 (head, m, sigma) jobs, with any experiment."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import ROOT, compose_train

SIGMAS = [0.0125, 0.0175, 0.025, 0.05]
# The paper's Tables I and II (REFERENCE.md), written out: (head target, plus, m, sigma)
TABLE1 = ([("ArcFace", None, m, None) for m in (0.45, 0.5, 0.55)]
          + [("ElasticArcFace", False, 0.5, s) for s in SIGMAS] + [("ElasticArcFace", True, 0.5, s) for s in SIGMAS])
TABLE2 = ([("CosFace", None, m, None) for m in (0.3, 0.35, 0.4)]
          + [("ElasticCosFace", False, 0.35, s) for s in SIGMAS] + [("ElasticCosFace", True, 0.35, s) for s in SIGMAS])


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The per-job overrides of `python train.py -m <overrides>` by Hydra's basic sweeper's documented rule:
    the config's `hydra.sweeper.params`, then the command line's comma lists, every combination in that order."""
    cfg = compose_train([o for o in overrides if "," not in o])
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    parsed = OverridesParser.create().parse_overrides(params + [o for o in overrides if "," in o])
    choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
               else [f"{o.get_key_element()}={o.get_value_element_as_str()}"] for o in parsed]
    return [list(job) for job in itertools.product(*choices)]


def job_row(overrides: list[str]) -> tuple:
    cfg = compose_train(overrides)
    from hydra.utils import instantiate

    head = instantiate(cfg.model.head)
    return type(head).__name__, getattr(head, "plus", None), cfg.m, cfg.sigma


@pytest.mark.parametrize("search, table", [("paper_table1", TABLE1), ("paper_table2", TABLE2)])
def test_paper_table_is_exactly_the_papers_eleven_jobs(search, table):
    jobs = sweep_jobs([f"hparams_search={search}"])
    assert len(jobs) == 11
    rows = [job_row([f"hparams_search={search}", *job]) for job in jobs]
    assert rows == table  # right head, m and sigma: the head group's defaults do not win over the row
    cfg = compose_train([f"hparams_search={search}", *jobs[4]])
    assert (cfg.model.head.m, cfg.model.head.get("sigma")) == (table[4][2], table[4][3])  # the head is built from them


def test_paper_table_with_casia_experiment_and_three_seeds():
    base = ["hparams_search=paper_table1", "experiment=casia_r50_sigma_grid", "data.root=/data/casia"]
    jobs = sweep_jobs(base + ["seed=1,2,3"])
    assert len(jobs) == 33 and sorted({j[-1] for j in jobs}) == ["seed=1", "seed=2", "seed=3"]
    cfg = compose_train(base + jobs[-1])
    assert (cfg.m, cfg.sigma, cfg.seed, cfg.model.head.name == "elastic_arc_plus") == (0.5, 0.05, 3, True)
    assert cfg.model.backbone.name == "iresnet50"
    assert list(cfg.data.val_sets.names) == ["lfw", "agedb_30", "calfw", "cplfw", "cfp_fp"]


def test_command_line_beats_the_row():
    cfg = compose_train(["paper_row=elastic_arc_plus_sigma0.0175", "sigma=0.03"])
    assert (cfg.model.head.name == "elastic_arc_plus", cfg.m, cfg.sigma) == (True, 0.5, 0.03)


def test_the_wide_lfw_benchmark_is_the_papers_seven_rows_seed_by_seed():
    jobs = sweep_jobs(["hparams_search=lfw_folds6_10", "data.root=/data/lfw_split_6_10"])
    assert len(jobs) == 35 and [j[0] for j in jobs[:7]] == ["seed=1"] * 7
    assert {j[1].split("=")[1] for j in jobs} == set(LFW_ROWS) - {"elastic_arc_compiled"}
    cfg = compose_train(["hparams_search=lfw_folds6_10", "data.root=/data/lfw_split_6_10", *jobs[1]])
    assert cfg.task_name == "lfw_folds6_10" and list(cfg.data.val_sets.names) == ["lfw_folds6_10"]
    assert (cfg.s, cfg.scheduler.warmup_fraction) == ("class_count", 0.2)  # the template's defaults


@pytest.mark.slow
def test_sweep_demo_runs_the_grid_and_the_report_ranks_it(tmp_path):
    """What `make sweep-demo` runs, at debug=tiny size, from a fresh working directory: 11 jobs, one table."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "WANDB_MODE": "offline"}
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hparams_search=paper_table1",
                          "experiment=sweep_demo", "debug=tiny"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "sweep_demo" / "multiruns").iterdir()
    out = subprocess.run([sys.executable, "-m", "elasticface.cli.report", str(sweep)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| loss | pose | lighting | expression | hard | mean | Borda sum | rank |" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(("| ArcFace", "| ElasticFace"))]
    assert len(rows) == 11 and sum("★" in r for r in rows) >= 3
    assert (sweep / "report.csv").exists() and (sweep / "report_acc_vs_sigma.png").exists()


# The LFW fold-10 benchmark (issue: real faces): 7 heads at their paper defaults (registry values written out
# from REFERENCE.md's paper defaults and the classic heads' papers) plus ElasticFace-Arc compiled, 5 seeds.
LFW_ROWS = {
    "softmax": ("Softmax", None, None, "false"), "arcface": ("ArcFace", 0.5, None, "false"),
    "cosface": ("CosFace", 0.35, None, "false"), "elastic_arc": ("ElasticArcFace", 0.5, 0.05, "false"),
    "elastic_arc_plus": ("ElasticArcFace", 0.5, 0.0175, "false"),
    "elastic_cos": ("ElasticCosFace", 0.35, 0.05, "false"),
    "elastic_cos_plus": ("ElasticCosFace", 0.35, 0.025, "false"),
    "elastic_arc_compiled": ("ElasticArcFace", 0.5, 0.05, "cpu"),
}


def test_lfw_fold10_benchmark_is_forty_jobs_seed_by_seed():
    jobs = sweep_jobs(["hparams_search=lfw_fold10", "data.root=/data/lfw_split"])
    assert len(jobs) == 40
    assert [j[0] for j in jobs[:8]] == ["seed=1"] * 8  # every row at seed 1 first: a partial sweep is paired
    assert {j[1].split("=")[1] for j in jobs} == set(LFW_ROWS)
    for job in jobs[:8]:
        cfg = compose_train(["hparams_search=lfw_fold10", "data.root=/data/lfw_split", *job])
        from elasticface.training import build_module

        head = build_module(cfg, 3830).head  # folds 1-9's people, at the default scale=class_count
        row = LFW_ROWS[job[1].split("=")[1]]
        assert head.s == (None if row[0] == "Softmax" else pytest.approx(11.667769523625457, rel=1e-12))
        assert (type(head).__name__, cfg.m, cfg.sigma, str(cfg.model.compile).lower()) == row, job
        assert cfg.task_name == "lfw_fold10" and cfg.eigenface_baseline and cfg.seed == 1
        assert cfg.model.backbone.img_size == cfg.data.image_size == 56
