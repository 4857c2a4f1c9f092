"""benchmarks/bench_finetune_domains.py: the per-domain table and docs/finetune.md's rule for the default, on run
folders written here with gains worked out by hand."""

import importlib.util
import json
import sys

from conftest import ROOT


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_finetune_domains",
                                                  ROOT / "benchmarks" / "bench_finetune_domains.py")
    bench = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up there
    spec.loader.exec_module(bench)
    return bench


def write_run(root, domain, candidate, seed, final, start=0.80, scored_start=True):
    folder = root / domain / candidate / f"seed{seed}"
    folder.mkdir(parents=True)
    summary = {"val/acc_mean": {"best": final, "final": final}, "val/sets": {"target": final}, "train_seconds": 600.0,
               "weights_finite": True,
               "baseline/start_acc_per_set": {"target": start} if scored_start else {}}
    (folder / "summary.json").write_text(json.dumps(summary))
    log = ["[..][elasticface.utils.progress][INFO] - verifying at step 12: 100%, 4 of 4 batches, 40 s"]
    if scored_start:
        log.insert(0, "[..][elasticface.utils.progress][INFO] - baseline start: the loaded weights with flip on "
                      "target: accuracy 80.00%, 390 images in 22.5 s")
    (folder / "train.log").write_text("\n".join(log) + "\n")


def test_the_best_mean_gain_within_every_domains_spread_is_the_default(tmp_path, capsys):
    """Gains in points over a start of 80.00, three seeds each:

    domain a: wide +3, +4, +5 (mean 4, sd 1); safe +2, +3, +4 (mean 3, sd 1); bold +6, +7, +8 (mean 7, sd 1)
    domain b: wide +2, +2.5, +3 (mean 2.5, sd 0.5); safe +2, +2, +2 (mean 2); bold -1, -1, -1 (mean -1)
    domain c: wide 0, 0, 0; safe 0, +1, +2 (mean 1, sd 1); bold +1, +1, +1

    Spreads (the largest sd per domain): a 1, b 0.5, c 1. Best per domain: a bold 7, b wide 2.5, c bold 1 (wide
    and safe are within 1 there). bold loses 3.5 on b (> 0.5): out, though its mean gain (2.33) is the best.
    wide loses 3 on a (> 1): out. safe loses 4 on a: out too. None qualifies, so the baseline stays; with a's
    bold runs removed, a's best is wide (4; safe -1 within 1), and wide (mean 2.17) beats safe (2.0)."""
    bench = load_bench()
    gains = {"a": {"wide": [3, 4, 5], "safe": [2, 3, 4], "bold": [6, 7, 8]},
             "b": {"wide": [2, 2.5, 3], "safe": [2, 2, 2], "bold": [-1, -1, -1]},
             "c": {"wide": [0, 0, 0], "safe": [0, 1, 2], "bold": [1, 1, 1]}}
    for domain, row in gains.items():
        for candidate, values in row.items():
            for seed, gain in enumerate(values, 1):
                # the start baseline scored once per domain, as runs with start_baseline=false leave it to another
                write_run(tmp_path, domain, candidate, seed, 0.80 + gain / 100, scored_start=seed == 1)
    cells = bench.read_cells(tmp_path)
    assert round(cells["b"]["wide"].mean, 6) == 2.5 and round(cells["a"]["bold"].std, 6) == 1.0
    assert {d: round(s, 6) for d, s in bench.spreads(cells).items()} == {"a": 1.0, "b": 0.5, "c": 1.0}
    chosen, why_not = bench.choose_default(cells)
    assert chosen is None and set(why_not) == {"wide", "safe", "bold"}
    assert "b: -3.50 against the best, beyond the seed spread 0.50" in why_not["bold"]

    for seed in (1, 2, 3):
        (tmp_path / "a" / "bold" / f"seed{seed}" / "summary.json").unlink()
    (tmp_path / "a" / "bold" / "seed2" / "train.log").write_text("... training diverged at step 12 (epoch 0): ...")
    assert bench.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "default: wide"
    assert "not the default: bold: no finished run on a" in out
    assert "not the default: safe: mean gain +2.00 against +2.17" in out
    assert "unfinished, left out: a/bold seed(s) [1, 3]" in out
    assert "| a (spread 1.00) | bold | 0 | nan | +nan ± 0.00 |  | 1 | nan | nan |" in out
    # verification: (62.5 + 40 + 40) / 3 s, the start scored at seed 1 only
    assert "| b (spread 0.50) | wide | 3 | 82.50 | +2.50 ± 0.50 | +2.00, +2.50, +3.00 | 0 | 600 | 48 |" in out


def test_a_candidate_that_diverged_on_a_domain_is_not_the_default(tmp_path):
    bench = load_bench()
    for domain in ("a", "b", "c"):
        for seed in (1, 2, 3):
            write_run(tmp_path, domain, "plain", seed, 0.81 + seed / 100)  # +2, +3, +4: as good as fast's +3
            write_run(tmp_path, domain, "fast", seed, 0.83 if (domain, seed) != ("c", 3) else float("nan"))
    chosen, why_not = bench.choose_default(bench.read_cells(tmp_path))
    assert chosen == "plain" and why_not == {"fast": "diverged on c"}


def test_a_candidate_with_fewer_than_three_seeds_on_a_domain_is_not_the_default(tmp_path):
    """The rule asks for three seeds or more: a candidate ahead at two seeds is said, not chosen."""
    bench = load_bench()
    for domain in ("a", "b"):
        for seed in (1, 2, 3):
            write_run(tmp_path, domain, "plain", seed, 0.81 + seed / 100)
            if (domain, seed) != ("b", 3):
                write_run(tmp_path, domain, "longer", seed, 0.815 + seed / 100)  # +0.5 on plain, within 1
    chosen, why_not = bench.choose_default(bench.read_cells(tmp_path))
    assert chosen == "plain" and why_not == {"longer": "b: 2 seed(s); the rule asks for 3 or more on every domain"}
    assert bench.choose_default(bench.read_cells(tmp_path), min_seeds=2)[0] == "longer"
