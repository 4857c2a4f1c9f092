"""elasticface-report: the paper's Borda table from summary.json files alone."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from helpers.exit_status import exit_status

from elasticface.report import borda, build_report, max_ranks, read_sweep, to_markdown
from elasticface.cli.report import main

BENCHMARKS = ["lfw", "agedb_30", "calfw", "cplfw", "cfp_fp"]
# Table I of the paper (REFERENCE.md): (head, m, sigma), accuracies in %, the Borda sum the paper prints.
TABLE1 = [
    (("arcface", 0.55, None), [99.52, 94.58, 93.82, 89.05, 95.24], 8),
    (("arcface", 0.5, None), [99.46, 94.83, 93.88, 89.72, 95.36], 13),
    (("arcface", 0.45, None), [99.43, 94.66, 93.80, 89.42, 95.53], 9),
    (("elastic_arc", 0.5, 0.0125), [99.53, 94.80, 93.68, 89.72, 95.43], 11),
    (("elastic_arc", 0.5, 0.0175), [99.47, 95.13, 93.67, 89.53, 95.54], 11),
    (("elastic_arc", 0.5, 0.025), [99.52, 94.95, 93.78, 89.50, 95.44], 12),
    (("elastic_arc", 0.5, 0.05), [99.52, 94.82, 93.90, 89.79, 95.59], 17),
    (("elastic_arc_plus", 0.5, 0.0125), [99.53, 95.00, 93.68, 89.58, 95.40], 13),
    (("elastic_arc_plus", 0.5, 0.0175), [99.53, 95.07, 93.95, 89.37, 95.67], 15),
    (("elastic_arc_plus", 0.5, 0.025), [99.42, 95.15, 93.73, 89.48, 95.36], 10),
    (("elastic_arc_plus", 0.5, 0.05), [99.45, 94.83, 94.00, 89.50, 95.56], 13),
]


def write_job(
    root: Path, name: str, head: str, m: float, sigma: float | None, accs: dict[str, float], seed: int = 42
) -> Path:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    summary = {"head": head, "m": m, "sigma": sigma, "seed": seed, "s": 64.0, "backbone": "iresnet50",
               "data": "recordio", "val/sets": accs,
               "val/acc_mean": {"best": None, "final": float(np.mean(list(accs.values())))}}
    (job / "summary.json").write_text(json.dumps(summary))
    return job


def test_max_rank_rule_of_the_reference():
    assert max_ranks([99.47, 99.52, 99.52, 99.53]) == [1, 3, 3, 4]


def test_borda_reproduces_every_sum_of_table1():
    for family in ("arcface", "elastic_arc", "elastic_arc_plus"):
        rows = [r for r in TABLE1 if r[0][0] == family]
        _, sums = borda([dict(zip(BENCHMARKS, accs)) for _, accs, _ in rows], BENCHMARKS)
        assert sums == [paper for *_, paper in rows], family


def test_report_of_a_table1_sweep_from_summary_files(tmp_path, capsys):
    for i, ((head, m, sigma), accs, _) in enumerate(TABLE1):
        write_job(tmp_path, f"{i}_paper_row={head}", head, m, sigma, {b: a / 100 for b, a in zip(BENCHMARKS, accs)})
    (tmp_path / "11_paper_row=still_running" / ".hydra").mkdir(parents=True)  # no summary.json yet
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "report.csv").open()))
    done = {(r["head"], float(r["m"]), float(r["sigma"]) if r["sigma"] else None): r
            for r in rows if r["status"] == "finished"}
    assert len(done) == 11
    for key, _, paper_sum in TABLE1:
        assert int(done[key]["borda_sum"]) == paper_sum, key
    winners = sorted(k for k, r in done.items() if r["winner"] == "1")
    assert winners == [("arcface", 0.5, None), ("elastic_arc", 0.5, 0.05), ("elastic_arc_plus", 0.5, 0.0175)]
    # ranked within each family, families in the paper's order
    assert [r["configuration"] for r in rows[:3]] == ["ArcFace m=0.5", "ArcFace m=0.45", "ArcFace m=0.55"]
    assert [r for r in rows if r["status"] != "finished"][0]["configuration"] == "11_paper_row=still_running"
    markdown = (tmp_path / "report.md").read_text()
    assert markdown in printed
    assert ("| ElasticFace-Arc m=0.5 σ=0.05 | 99.52 (3) | 94.82 (2) | 93.90 (4) | 89.79 (4) | 95.59 (4) | 94.72 "
            "| **17** | 1 ★ |") in markdown
    assert "`11_paper_row=still_running`: no summary.json: still running, or failed" in markdown
    assert (tmp_path / "report_acc_vs_sigma.png").stat().st_size > 10_000


def test_seeds_give_mean_std_rank_on_means_and_flag_overlaps(tmp_path):
    # A and B: 3 seeds each, means 0.900 and 0.905 with a spread of 0.02 -> not distinguishable;
    # C: clearly worse. A wins seed 1, B wins on the means.
    per_seed = {"A": (0.91, 0.88, 0.91), "B": (0.88, 0.92, 0.915), "C": (0.70, 0.71, 0.72)}
    sigmas = {"A": 0.0125, "B": 0.025, "C": 0.05}
    for name, accs in per_seed.items():
        for seed, acc in enumerate(accs, 1):
            by_set = {"pose": acc, "hard": acc - 0.1}
            write_job(tmp_path, f"{name}_{seed}", "elastic_arc", 0.5, sigmas[name], by_set, seed)
    report = build_report(read_sweep(tmp_path))
    rows = {r.sigma: r for r in report.rows}
    a, b, c = rows[0.0125], rows[0.025], rows[0.05]
    assert sorted(a.seeds) == [1, 2, 3] and a.mean("pose") == pytest.approx(0.9)
    assert a.std("pose") == pytest.approx(np.std([0.91, 0.88, 0.91], ddof=1))
    assert [r.sigma for r in report.rows] == [0.025, 0.0125, 0.05] and b.winner and b.borda_sum == 6
    assert a.within_spread_of_winner and not c.within_spread_of_winner
    assert len(report.notes) == 1 and "σ=0.025 and ElasticFace-Arc m=0.5 σ=0.0125" in report.notes[0]
    markdown = to_markdown(report)
    assert "| ElasticFace-Arc m=0.5 σ=0.025 | 90.50 ± 2.18 (3) | 80.50 ± 2.18 (3) |" in markdown
    assert "2 ≈" in markdown and "not reliable" in markdown


def test_bad_summaries_are_listed_or_refused_with_the_file_named(tmp_path, capsys):
    write_job(tmp_path, "0", "arcface", 0.5, None, {"lfw": 0.9})
    bad = write_job(tmp_path, "1", "arcface", 0.45, None, {"lfw": 0.8})
    (bad / "summary.json").write_text(json.dumps({"head": "arcface"}))
    report = build_report(read_sweep(tmp_path))
    assert len(report.rows) == 1 and report.unfinished[0][0] == "1"
    assert "1/summary.json: missing key(s) ['m', 'sigma', 'seed', 'val/sets']" in report.unfinished[0][1]
    write_job(tmp_path, "2", "arcface", 0.55, None, {"agedb_30": 0.8})
    assert exit_status(main, [str(tmp_path)]) == 2
    assert "2/summary.json: 'val/sets' has benchmarks ['agedb_30']" in capsys.readouterr().err
    assert exit_status(main, [str(tmp_path / "nowhere")]) == 2


def test_seed_table_pairs_each_row_with_arcface_and_compiled_with_eager(tmp_path):
    """The LFW fold-10 table: final and best mean ± std over seeds, the difference to ArcFace paired by seed with
    Student's 95% interval (t(0.975, 2) = 4.303 from any t table), the compiled row against its eager twin, and
    the baselines every run scored."""
    finals = {("arcface", False): [0.80, 0.82, 0.81], ("elastic_arc", False): [0.82, 0.83, 0.84],
              ("elastic_arc", "cpu"): [0.81, 0.84, 0.83]}
    for (head, compile_), accs in finals.items():
        for seed, acc in enumerate(accs, 1):
            job = write_job(tmp_path, f"{seed}_{head}_{compile_}", head, 0.5, 0.05 if "elastic" in head else None,
                            {"lfw_fold10": acc}, seed)
            summary = json.loads((job / "summary.json").read_text())
            summary.update({"compile": compile_, "val/acc_mean": {"final": acc, "best": acc + 0.01},
                            "baseline/pixel_acc": 0.6, "baseline/eigenface_acc": 0.65})
            (job / "summary.json").write_text(json.dumps(summary))
    markdown = to_markdown(build_report(read_sweep(tmp_path)))
    diffs = np.array([0.02, 0.01, 0.03])  # elastic_arc - arcface, seed by seed
    half = 4.303 * diffs.std(ddof=1) / np.sqrt(3)
    assert (f"| ElasticFace-Arc m=0.5 σ=0.05 | 1 2 3 | 83.00 ± 1.00 | 84.00 ± 1.00 | "
            f"+2.00 ± 1.00 [±{100 * half:.2f}], n=3 |") in markdown  # 2.48 > 2.00: the interval holds 0
    assert "n=3 * |" in markdown  # the compiled row's difference to ArcFace (+1.67 ± 0.58) excludes 0
    assert "| ArcFace m=0.5 | 1 2 3 | 81.00 ± 1.00 | 82.00 ± 1.00 | — |" in markdown
    compiled = np.array([0.81, 0.84, 0.83]) - np.array([0.82, 0.83, 0.84])
    half = 4.303 * compiled.std(ddof=1) / np.sqrt(3)
    assert (f"ElasticFace-Arc m=0.5 σ=0.05 compile=cpu − the same row eager, same seed: "
            f"{100 * compiled.mean():+.2f} ± {100 * compiled.std(ddof=1):.2f} [±{100 * half:.2f}], n=3") in markdown
    assert "| baseline: raw pixels |  | 60.00 |  |  |" in markdown and "| baseline: eigenfaces |  | 65.00 |" in markdown


def test_seed_table_reads_what_ran_not_the_compile_setting(tmp_path):
    """`model.compile=auto` (the default) compiles on one machine and not another, and `true` falls back to eager
    without a toolchain: the table pairs rows by summary.json's `compiled`. A sweep compiled throughout keeps its
    ArcFace reference; a `true` row that ran eagerly is no compiled row."""
    def sweep(root: Path, rows: dict[tuple, list[float]]) -> str:
        for (head, setting, compiled), accs in rows.items():
            for seed, acc in enumerate(accs, 1):
                job = write_job(root, f"{seed}_{head}_{setting}", head, 0.5, 0.05 if "elastic" in head else None,
                                {"lfw_fold10": acc}, seed)
                summary = json.loads((job / "summary.json").read_text())
                summary.update({"compile": setting, "compiled": compiled,
                                "val/acc_mean": {"final": acc, "best": acc}})
                (job / "summary.json").write_text(json.dumps(summary))
        return to_markdown(build_report(read_sweep(root)))

    markdown = sweep(tmp_path / "gpu", {("arcface", "auto", True): [0.80, 0.82, 0.81],
                                        ("elastic_arc", "auto", True): [0.82, 0.83, 0.84]})
    assert "| ElasticFace-Arc m=0.5 σ=0.05 | 1 2 3 | 83.00 ± 1.00 | 83.00 ± 1.00 | +2.00 ± 1.00" in markdown
    markdown = sweep(tmp_path / "pairs", {("arcface", False, False): [0.80, 0.82, 0.81],
                                          ("elastic_arc", "auto", True): [0.81, 0.84, 0.83],
                                          ("elastic_arc", False, False): [0.82, 0.83, 0.84]})
    assert "ElasticFace-Arc m=0.5 σ=0.05 compile=auto − the same row eager, same seed: -0.33" in markdown
    markdown = sweep(tmp_path / "fell_back", {("arcface", False, False): [0.80, 0.82, 0.81],
                                              ("elastic_arc", True, False): [0.81, 0.84, 0.83],
                                              ("elastic_arc", False, False): [0.82, 0.83, 0.84]})
    assert "the same row eager" not in markdown


def _write_metrics(job: Path, rows: list[dict[str, float]], version: int = 0) -> None:
    path = job / "csv" / f"version_{version}" / "metrics.csv"
    path.parent.mkdir(parents=True)
    keys = sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(rows)


def test_training_curves_average_a_rows_seeds_step_by_step(tmp_path):
    """report_training.png: the logged training signals, seeds of a row averaged at the steps they share;
    a resumed run's later CSV version continues the earlier one."""
    from elasticface.report.curves import curves_by_row

    for seed, theta in ((1, 80.0), (2, 70.0)):
        for remedy, shift in (("none", 0.0), ("margin_warmup", -20.0)):
            job = write_job(tmp_path, f"{remedy}_{seed}", "arcface", 0.5, None, {"lfw_fold10": 0.8}, seed=seed)
            summary = json.loads((job / "summary.json").read_text())
            summary["choices"] = {"head": "arcface", "lfw_remedy": remedy}
            (job / "summary.json").write_text(json.dumps(summary))
            _write_metrics(job, [{"step": 9, "train/theta_y_mean_deg": theta + shift, "train/loss": 30.0},
                                 {"step": 9, "val/acc_mean": 0.5}])
            _write_metrics(job, [{"step": 19, "train/theta_y_mean_deg": theta + shift - 10, "train/loss": 20.0}], 1)
    rows = curves_by_row(read_sweep(tmp_path).finished)
    assert sorted(rows) == ["arcface, lfw_remedy=margin_warmup", "arcface, lfw_remedy=none"]
    steps, theta = rows["arcface, lfw_remedy=none"]["train/theta_y_mean_deg"]
    assert steps.tolist() == [9, 19] and theta.tolist() == [75.0, 65.0]
    assert rows["arcface, lfw_remedy=margin_warmup"]["train/theta_y_mean_deg"][1].tolist() == [55.0, 45.0]
    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "report_training.png").stat().st_size > 10_000


def test_a_table_of_remedies_pairs_each_with_arcface_under_none(tmp_path):
    """Rows that differ by a config-group choice (lfw_remedy) are rows of their own, named by it, and paired
    with ArcFace under `none` at the same seed; a choice that only renames the head (lfw_row) is not shown."""
    accs = {("none", 1): 0.76, ("none", 2): 0.78, ("margin_warmup", 1): 0.86, ("margin_warmup", 2): 0.87}
    for (remedy, seed), acc in accs.items():
        job = write_job(tmp_path, f"{remedy}_{seed}", "arcface", 0.5, None, {"lfw_fold10": acc}, seed=seed)
        summary = json.loads((job / "summary.json").read_text())
        summary["choices"] = {"head": "arcface", "lfw_row": "arcface", "lfw_remedy": remedy}
        (job / "summary.json").write_text(json.dumps(summary))
    job = write_job(tmp_path, "softmax_1", "softmax", None, None, {"lfw_fold10": 0.85}, seed=1)
    summary = json.loads((job / "summary.json").read_text())
    summary["choices"] = {"head": "softmax", "lfw_row": "softmax", "lfw_remedy": "none"}
    (job / "summary.json").write_text(json.dumps(summary))
    markdown = to_markdown(build_report(read_sweep(tmp_path)))
    assert "| ArcFace m=0.5 lfw_remedy=margin_warmup | 1 2 | 86.50 ± 0.71 | " in markdown
    assert "final − ArcFace m=0.5 lfw_remedy=none, same seed" in markdown
    # (86 - 76, 87 - 78) = (+10, +9): mean +9.50, std 0.71, t(1) 12.706 x 0.71 / sqrt(2) = 6.35
    assert "| +9.50 ± 0.71 [±6.35], n=2 * |" in markdown
    assert "lfw_row" not in markdown


def test_a_sweep_of_fine_tunes_pairs_each_row_with_plain_fine_tuning_set_by_set(tmp_path):
    """Runs with weights= (summary.json's `finetune`): per set the mean ± std, its change from the loaded weights,
    and the difference to the row with every part of the recipe off at the same seed."""
    plain = {"imprint_centers": False, "head_only_epochs": 0, "l2sp_alpha": 0.0, "backbone_lr_scale": 1.0,
             "freeze_backbone_bn": False}
    runs = {("plain", 1): (0.90, 0.995), ("plain", 2): (0.91, 0.994), ("plain", 3): (0.92, 0.993),
            ("imprint", 1): (0.93, 0.995), ("imprint", 2): (0.95, 0.995), ("imprint", 3): (0.94, 0.995)}
    for (row, seed), (fp, lfw) in runs.items():
        job = write_job(tmp_path, f"{row}_{seed}", "elastic_arc", 0.5, 0.05, {"cfp_fp": fp, "lfw": lfw}, seed=seed)
        summary = json.loads((job / "summary.json").read_text())
        summary["choices"] = {"head": "elastic_arc", "finetune_row": row}
        summary["finetune"] = plain | ({"imprint_centers": True} if row == "imprint" else {})
        summary["baseline/start_acc_per_set"] = {"cfp_fp": 0.895, "lfw": 0.9945}
        (job / "summary.json").write_text(json.dumps(summary))
    markdown = to_markdown(build_report(read_sweep(tmp_path)))
    assert "| row | seeds | cfp_fp | cfp_fp − plain | lfw | lfw − plain |" in markdown
    # imprint - plain: cfp_fp (+3, +4, +2): mean +3.00, std 1.00, t(2) 4.303 x 1.00 / sqrt(3) = 2.48
    assert ("| ElasticFace-Arc m=0.5 σ=0.05 finetune_row=imprint | 1 2 3 | 94.00 ± 1.00 (+4.50) | "
            "+3.00 ± 1.00 [±2.48], n=3 * | 99.50 ± 0.00 (+0.05) | +0.10 ± 0.10 [±0.25], n=3 |") in markdown
    assert "| ElasticFace-Arc m=0.5 σ=0.05 finetune_row=plain | 1 2 3 | 91.00 ± 1.00 (+1.50) | — |" in markdown
    assert "| loaded weights, before the first step |  | 89.50 |  | 99.45 |  |" in markdown
