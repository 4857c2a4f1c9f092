"""The paper's table from a sweep: one row per configuration, accuracy per benchmark (mean ± std over
seeds), Borda ranks within the loss family, their sum, the family's winner, and which rows the seeds
cannot tell apart."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from elasticface.report.borda import borda
from elasticface.report.finetune import finetune_table
from elasticface.report.seeds import seed_table
from elasticface.report.sweep import Sweep
from elasticface.utils.errors import BadValue

# Display names and the order of the paper's tables; other heads follow alphabetically.
FAMILY_NAMES = {
    "arcface": "ArcFace",
    "elastic_arc": "ElasticFace-Arc",
    "elastic_arc_plus": "ElasticFace-Arc+",
    "cosface": "CosFace",
    "elastic_cos": "ElasticFace-Cos",
    "elastic_cos_plus": "ElasticFace-Cos+",
}
# Besides (head, m, sigma), what else makes two jobs different configurations (shown only when it varies).
EXTRA_KEYS = ("s", "backbone", "data", "compile", "margin_schedule")


def _choice(summary: dict[str, Any], key: str) -> str:
    return str((summary.get("choices") or {}).get(key))


def varying_choices(finished: list[Any]) -> list[str]:
    """Config-group choices (summary.json's `choices`) that vary across the jobs and say more than the head, m, σ
    and s do: `lfw_remedy` in a table of remedies, not `lfw_row` or `paper_row`, which only name those."""
    keys = sorted({k for j in finished for k in (j.summary.get("choices") or {})})
    base = [tuple(str(j.summary.get(k)) for k in ("head", "m", "sigma", "s")) for j in finished]
    out = []
    for key in keys:
        values = [_choice(j.summary, key) for j in finished]
        if len(set(values)) > 1 and len(set(zip(base, values))) > len(set(base)):
            out.append(key)
    return out


@dataclass
class Row:
    """One configuration: every seed's accuracy per benchmark, and its place in its family."""

    family: str
    m: float | None
    sigma: float | None
    extra: dict[str, Any]
    seeds: list[Any] = field(default_factory=list)
    runs: list[dict[str, float]] = field(default_factory=list)  # per seed: benchmark -> accuracy (fraction)
    summaries: list[dict[str, Any]] = field(default_factory=list)  # per seed: the job's summary.json
    borda: dict[str, int] = field(default_factory=dict)
    borda_sum: int = 0
    rank: int = 0
    winner: bool = False
    within_spread_of_winner: bool = False

    def seed_list(self) -> str:
        """The seeds in order (the jobs finish, and are read, in any order)."""
        numbers = sorted(s for s in self.seeds if isinstance(s, int))
        return " ".join(map(str, numbers + sorted((s for s in self.seeds if not isinstance(s, int)), key=str)))

    def mean(self, bench: str) -> float:
        return float(np.mean([r[bench] for r in self.runs]))

    def std(self, bench: str) -> float:
        values = [r[bench] for r in self.runs]
        return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0

    def avg_per_seed(self) -> list[float]:
        return [float(np.mean(list(r.values()))) for r in self.runs]

    @property
    def acc_mean(self) -> float:
        return float(np.mean(self.avg_per_seed()))

    @property
    def acc_spread(self) -> float | None:
        """Std over seeds of the accuracy averaged over benchmarks; None with a single seed."""
        values = self.avg_per_seed()
        return float(np.std(values, ddof=1)) if len(values) > 1 else None

    def label(self, varying: Sequence[str] = ()) -> str:
        parts = [FAMILY_NAMES.get(self.family, self.family)]
        if self.m is not None:
            parts.append(f"m={self.m:g}")
        if self.sigma is not None:
            parts.append(f"σ={self.sigma:g}")
        # compile is a speed setting: named where it is on, silent where off
        parts += [f"{k}={self.extra[k]}" for k in varying if k != "compile" or self.extra[k] not in (None, False)]
        return " ".join(parts)


@dataclass
class Report:
    benchmarks: list[str]
    rows: list[Row]  # grouped by family (paper order), ranked within each
    varying: list[str]
    unfinished: list[tuple[str, str]]  # (job directory, why)
    notes: list[str]
    stopped: list[tuple[str, str]] = field(default_factory=list)  # (job directory, where and why it stopped early)


def _family_order(family: str) -> tuple[int, str]:
    order = list(FAMILY_NAMES)
    return (order.index(family), family) if family in order else (len(order), family)


def build_report(sweep: Sweep) -> Report:
    """Group the finished jobs into configurations, rank each family by its Borda count on the seed means."""
    finished = sweep.finished
    unfinished = [(str(j.path.relative_to(sweep.root)) or ".", j.problem) for j in sweep.unfinished]
    stopped = [(str(j.path.relative_to(sweep.root)) or ".", j.stopped) for j in sweep.stopped]
    if not finished:
        return Report([], [], [], unfinished, [], stopped)
    benchmarks = list(finished[0].summary["val/sets"])
    for job in finished[1:]:
        if set(job.summary["val/sets"]) != set(benchmarks):
            raise BadValue(
                f"{job.path / 'summary.json'}: 'val/sets' has benchmarks {sorted(job.summary['val/sets'])}, "
                f"but {finished[0].path / 'summary.json'} has {sorted(benchmarks)}; "
                "a table needs the same ones everywhere"
            )
    extra_values = {k: {str(j.summary.get(k)) for j in finished} for k in EXTRA_KEYS}
    choices = varying_choices(finished)
    varying = [k for k in EXTRA_KEYS if len(extra_values[k]) > 1] + choices

    rows: dict[tuple, Row] = {}
    for job in finished:
        s = job.summary
        extra = {k: s.get(k) for k in EXTRA_KEYS} | {k: _choice(s, k) for k in choices}
        key = (s["head"], s["m"], s["sigma"], *(str(extra[k]) for k in varying))
        row = rows.setdefault(key, Row(s["head"], s["m"], s["sigma"], extra))
        row.seeds.append(s["seed"])
        row.runs.append({b: float(s["val/sets"][b]) for b in benchmarks})
        row.summaries.append(s)

    ordered: list[Row] = []
    notes: list[str] = []
    for family in sorted({r.family for r in rows.values()}, key=_family_order):
        members = [r for r in rows.values() if r.family == family]
        ranks, sums = borda([{b: r.mean(b) for b in benchmarks} for r in members], benchmarks)
        for r, rk, total in zip(members, ranks, sums):
            r.borda, r.borda_sum = rk, total
        members.sort(key=lambda r: (-r.borda_sum, -r.acc_mean))
        best = members[0].borda_sum
        for i, r in enumerate(members):
            r.rank = 1 + sum(o.borda_sum > r.borda_sum for o in members)
            r.winner = r.borda_sum == best
        winner = members[0]
        for r in members:
            r.within_spread_of_winner = (not r.winner) and _indistinct(winner, r)
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                if _indistinct(a, b):
                    spread = max(a.acc_spread, b.acc_spread)
                    notes.append(
                        f"{a.label(varying)} and {b.label(varying)}: mean accuracies differ by "
                        f"{100 * abs(a.acc_mean - b.acc_mean):.2f} points, less than their seed spread "
                        f"(std up to {100 * spread:.2f}): their order is not reliable"
                    )
        ordered += members
    return Report(benchmarks, ordered, varying, unfinished, notes, stopped)


def _indistinct(a: Row, b: Row) -> bool:
    """Two configurations whose seed-averaged accuracies differ by less than the larger seed std."""
    if a.acc_spread is None or b.acc_spread is None:
        return False
    return abs(a.acc_mean - b.acc_mean) < max(a.acc_spread, b.acc_spread)


def _pct(mean: float, std: float | None, seeds: int) -> str:
    return f"{100 * mean:.2f}" if seeds < 2 or std is None else f"{100 * mean:.2f} ± {100 * std:.2f}"


def to_markdown(report: Report) -> str:
    """The paper's table: accuracy (Borda rank) per benchmark, sum, rank within the family, winner ★."""
    lines = []
    if report.rows:
        seeds = sorted({len(r.runs) for r in report.rows})
        any_within_spread = any(r.within_spread_of_winner for r in report.rows)
        lines.append(
            f"Accuracy in % on each benchmark (Borda rank within the loss family in brackets; "
            f"{'/'.join(map(str, seeds))} seed(s) per configuration{', mean ± std' if max(seeds) > 1 else ''}); "
            f"ranked by the Borda sum within each family; ★ = the family's winner"
            f"{'; ≈ = within the seed spread of the winner' if any_within_spread else ''}."
        )
        lines.append("")
        head = ["loss", *report.benchmarks, "mean", "Borda sum", "rank"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in report.rows:
            cells = [r.label(report.varying)]
            cells += [f"{_pct(r.mean(b), r.std(b), len(r.runs))} ({r.borda[b]})" for b in report.benchmarks]
            cells.append(_pct(r.acc_mean, r.acc_spread, len(r.runs)))
            cells.append(f"**{r.borda_sum}**" if r.winner else str(r.borda_sum))
            cells.append(f"{r.rank} ★" if r.winner else f"{r.rank} ≈" if r.within_spread_of_winner else str(r.rank))
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("No finished job yet (no summary.json).")
    if any(len(r.runs) > 1 for r in report.rows):
        lines += ["", "By seed:", ""] + seed_table(report.rows, report.varying)
    tuned = finetune_table(report.rows, report.benchmarks, report.varying)
    if tuned:
        lines += ["", "Fine-tuning, set by set:", ""] + tuned
    if report.notes:
        lines += ["", "Not distinguishable by the seeds:"] + [f"- {n}" for n in report.notes]
    if report.stopped:
        lines += ["", f"Stopped early by successive halving or a pruner ({len(report.stopped)}), not in the table "
                  "(their accuracy is from fewer epochs; the sweep's halving.json or optuna.journal has every step):"]
        lines += [f"- `{path}`: {why}" for path, why in report.stopped]
    if report.unfinished:
        lines += ["", f"Jobs without a result ({len(report.unfinished)}), not in the table:"]
        lines += [f"- `{path}`: {why}" for path, why in report.unfinished]
    return "\n".join(lines) + "\n"


def to_csv(report: Report) -> str:
    """One line per configuration, machine-readable (accuracies as fractions); then one per unfinished job,
    its ``status`` saying why."""
    out = io.StringIO()
    w = csv.writer(out)
    bench_cols = [f"{b}/{k}" for b in report.benchmarks for k in ("acc_mean", "acc_std", "borda")]
    w.writerow(["status", "family", "configuration", "head", "m", "sigma", *report.varying, "seeds", "runs",
                *bench_cols, "acc_mean", "acc_std", "borda_sum", "rank", "winner", "within_spread_of_winner"])
    for r in report.rows:
        bench = [v for b in report.benchmarks for v in (r.mean(b), r.std(b), r.borda[b])]
        spread = r.acc_spread
        w.writerow(["finished", FAMILY_NAMES.get(r.family, r.family), r.label(report.varying), r.family, r.m,
                    r.sigma, *(r.extra[k] for k in report.varying), r.seed_list(), len(r.runs), *bench,
                    r.acc_mean, "" if spread is None or math.isnan(spread) else spread, r.borda_sum, r.rank,
                    int(r.winner), int(r.within_spread_of_winner)])
    for path, why in report.stopped + report.unfinished:
        w.writerow([why, "", path, "", "", "", *("" for _ in report.varying), "", 0,
                    *("" for _ in bench_cols), "", "", "", "", "", ""])
    return out.getvalue()
