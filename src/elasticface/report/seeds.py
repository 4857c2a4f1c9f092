"""A sweep over seeds, row by row: final and best accuracy (mean ± std), the difference to a reference row
paired at the same seed, and the baselines every run scored on the same pairs.

Why paired: two heads trained from the same seed share the initial weights, the batch order and the flips,
so the per-seed difference removes most of the seed-to-seed spread that the two rows' own stds include.
A difference is called *distinguishable* when its 95% confidence interval (Student's t over the paired
seeds) excludes 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

REFERENCE_FAMILY = "arcface"  # the row every other row is paired with, when the sweep has exactly one
# two-sided 95% quantiles of Student's t for 1..10 degrees of freedom (any table of the t distribution)
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


@dataclass
class Paired:
    """Row minus reference over the seeds both ran: mean, sample std, count and the 95% interval's half-width."""

    mean: float
    std: float | None
    n: int
    half_width: float | None

    @property
    def distinguishable(self) -> bool | None:
        return None if self.half_width is None else abs(self.mean) > self.half_width


def mean_std(values: list[float]) -> tuple[float, float | None]:
    return float(np.mean(values)), (float(np.std(values, ddof=1)) if len(values) > 1 else None)


def final_and_best(summaries: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per seed: the final and the best mean accuracy over the run's benchmarks."""
    acc = [s["val/acc_mean"] for s in summaries]
    return {"final": [float(a["final"]) for a in acc if a.get("final") is not None],
            "best": [float(a["best"]) for a in acc if a.get("best") is not None]}


def paired(row: dict[Any, float], reference: dict[Any, float]) -> Paired | None:
    """`row` and `reference` map seed -> accuracy; None when they share no seed."""
    seeds = sorted(set(row) & set(reference), key=str)
    if not seeds:
        return None
    diffs = [row[s] - reference[s] for s in seeds]
    mean, std = mean_std(diffs)
    half = None if std is None or len(diffs) - 1 > len(T95) else T95[len(diffs) - 2] * std / math.sqrt(len(diffs))
    return Paired(mean, std, len(diffs), half)


def baselines(summaries: list[dict[str, Any]]) -> dict[str, float]:
    """The baselines the runs scored (identical for every run on the same pairs; their mean otherwise)."""
    found: dict[str, list[float]] = {}
    for s in summaries:
        for name, key in (("raw pixels", "baseline/pixel_acc"), ("eigenfaces", "baseline/eigenface_acc")):
            if s.get(key) is not None:
                found.setdefault(name, []).append(float(s[key]))
    return {name: float(np.mean(v)) for name, v in found.items()}


def _pct(mean: float, std: float | None) -> str:
    return f"{100 * mean:.2f}" if std is None else f"{100 * mean:.2f} ± {100 * std:.2f}"


def _compiled(row: Any) -> bool:
    """Whether the row's runs trained a compiled backbone: summary.json's `compiled` where recorded (`auto`
    decides per machine; without a toolchain a run falls back to eager), else an explicit `compile` setting."""
    recorded = [s["compiled"] for s in row.summaries if "compiled" in s]
    if recorded:
        return all(recorded)
    return row.extra.get("compile") in (True, "true", "cpu")


def _final_by_seed(row: Any) -> dict[Any, float]:
    return {s["seed"]: float(s["val/acc_mean"]["final"]) for s in row.summaries
            if s["val/acc_mean"].get("final") is not None}


def _difference(d: Paired) -> str:
    return (f"{round(100 * d.mean, 2) + 0.0:+.2f}" + ("" if d.std is None else f" ± {100 * d.std:.2f}")  # no -0.00
            + ("" if d.half_width is None else f" [±{100 * d.half_width:.2f}]")
            + f", n={d.n}" + (" *" if d.distinguishable else ""))


def seed_table(rows: list[Any], varying: list[str]) -> list[str]:
    """Markdown lines: one row per configuration (`table.Row`s with their summaries), baselines last."""
    references = [r for r in rows if r.family == REFERENCE_FAMILY]
    if len(references) > 1:  # ArcFace under several settings (a table of remedies): eager, with none of them
        references = [r for r in references if not _compiled(r) and all(
            str(r.extra.get(k)) in ("none", "None") for k in varying if k not in ("s", "backbone", "data", "compile"))]
    reference = references[0] if len(references) == 1 else None
    ref_final = _final_by_seed(reference) if reference else {}
    head = ["row", "seeds", "final", "best"] + ([f"final − {reference.label(varying)}, same seed"] if reference else [])
    lines = ["Mean accuracy over the benchmarks in % (mean ± std over seeds). The difference is paired by seed: "
             "mean ± std, [95% interval], n; `*` where the interval excludes 0.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        fb = final_and_best(r.summaries)
        cells = [r.label(varying), r.seed_list(), _pct(*mean_std(fb["final"])),
                 _pct(*mean_std(fb["best"]))]
        if reference is not None:
            d = None if r is reference else paired(_final_by_seed(r), ref_final)
            cells.append("—" if d is None else _difference(d))
        lines.append("| " + " | ".join(cells) + " |")
    compiled = []
    for r in (r for r in rows if _compiled(r)):
        eager = [e for e in rows if not _compiled(e) and (e.family, e.m, e.sigma) == (r.family, r.m, r.sigma)]
        if len(eager) == 1:
            d = paired(_final_by_seed(r), _final_by_seed(eager[0]))
            if d is not None:
                compiled.append(f"- {r.label(varying)} − the same row eager, same seed: {_difference(d)}")
    for name, acc in baselines([s for r in rows for s in r.summaries]).items():
        lines.append("| " + " | ".join([f"baseline: {name}", "", f"{100 * acc:.2f}", ""] + ([""] if reference else []))
                     + " |")
    return lines + ([""] + compiled if compiled else [])
