"""The toy example over seeds: per head, how many seeds met the gap criterion or collapsed, and mean ± std.

One seed of a 2-D toy run can end with merged centres; the summary names those seeds and, when only some
collapsed, repeats the table without them, since one collapsed run's gap error swamps a mean over 5 seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: what the sweep summary reports per head, as (key in a run's results, column title)
SUMMARY_METRICS = (("gap_error_deg", r"mean \|gap − ideal\| (°)"),
                   ("worst_gap_error_deg", r"largest \|gap − ideal\| (°)"),
                   ("std_low_deg", "std, low-variation ids (°)"), ("std_high_deg", "std, high-variation ids (°)"),
                   ("overlap_pct", "overlap (%)"))
#: a run whose smallest centre gap is under this fraction of the ideal has merged centres: two or more
#: identities share one direction (a 2-D run that collapsed), which no gap or spread average describes
MERGED_FRACTION = 0.25
#: the toy's convergence criterion: every centre gap within the ideal ± this many degrees
GAP_TOLERANCE_DEG = 5.0


def job_measures(result: dict[str, Any]) -> dict[str, Any]:
    """One job's row of the summary, from its toy_2d.json: the keys of SUMMARY_METRICS, whether every gap lies
    within GAP_TOLERANCE_DEG of the ideal (``within_tolerance``) and whether its centres merged (``merged``)."""
    by_level = {float(k): v for k, v in result.get("mean_class_std_deg_by_variation", {}).items()}
    ideal = result["ideal_gap_deg"]
    worst = max(result["gap_max_deg"] - ideal, ideal - result["gap_min_deg"])
    return dict(gap_error_deg=result["gap_mean_abs_error_deg"], worst_gap_error_deg=worst,
                within_tolerance=worst <= GAP_TOLERANCE_DEG,
                std_low_deg=by_level[min(by_level)] if by_level else float("nan"),
                std_high_deg=by_level[max(by_level)] if len(by_level) > 1 else float("nan"),
                overlap_pct=100.0 * result.get("overlap_fraction", float("nan")),
                merged=result["gap_min_deg"] < MERGED_FRACTION * ideal)


def summarize_over_seeds(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per head, in the sweep's order: the seeds, those whose centres merged, those with every gap within
    GAP_TOLERANCE_DEG and, per metric of SUMMARY_METRICS, (mean, std over seeds); the std is the sample std
    (ddof=1), NaN with one seed."""
    heads: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        heads.setdefault(run["head"], []).append(run)
    summary = {}
    for head, head_runs in heads.items():
        row: dict[str, Any] = {"seeds": [r["seed"] for r in head_runs], "steps": head_runs[0]["steps"],
                               "merged_seeds": [r["seed"] for r in head_runs if r["merged"]],
                               "within_tolerance_seeds": [r["seed"] for r in head_runs if r["within_tolerance"]]}
        for key, _ in SUMMARY_METRICS:
            values = np.array([r[key] for r in head_runs], dtype=np.float64)
            row[key] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan"))
        summary[head] = row
    return summary


def format_toy_table(summary: dict[str, dict[str, Any]]) -> str:
    """The per-head table as Markdown: mean ± std over seeds, how many seeds met the gap criterion and which
    ended with merged centres."""
    lines = [f"| head | seeds | steps | every gap within ±{GAP_TOLERANCE_DEG:g}° | merged centres | "
             + " | ".join(title for _, title in SUMMARY_METRICS) + " |",
             "|---|---|---|---|---|" + "---|" * len(SUMMARY_METRICS)]
    for head, row in summary.items():
        cells = [f"{m:.2f}" if np.isnan(s) else f"{m:.2f} ± {s:.2f}" for m, s in (row[k] for k, _ in SUMMARY_METRICS)]
        merged = row["merged_seeds"]
        merged_cell = f"{len(merged)} (seed {', '.join(map(str, merged))})" if merged else "0"
        within = f"{len(row['within_tolerance_seeds'])} of {len(row['seeds'])}"
        lines.append(f"| {head} | {len(row['seeds'])} | {row['steps']} | {within} | {merged_cell} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_sweep_summary(runs: Sequence[dict[str, Any]]) -> str:
    """The per-head table over every run and, when some but not all runs merged, again without those: one
    collapsed run's gap error would swamp a mean over 5 seeds."""
    text = format_toy_table(summarize_over_seeds(runs))
    spread = [r for r in runs if not r["merged"]]
    if spread and len(spread) < len(runs):
        merged = len(runs) - len(spread)
        text += (f"\n\nwithout the {merged} run{'s' if merged > 1 else ''} whose centres merged "
                 f"(smallest gap under {MERGED_FRACTION:g} of the ideal):\n")
        text += format_toy_table(summarize_over_seeds(spread))
    return text
