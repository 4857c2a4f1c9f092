"""A sweep of fine-tunes (runs with weights=): per benchmark the final accuracy (mean ± std over seeds), its change
from the loaded weights, and each row's difference to plain fine-tuning at the same seed, with its 95% interval.

Plain fine-tuning is the row with every part of the recipe off (summary.json's `finetune`: no imprinted centres, no
head-only phase, no L2-SP, the backbone at the full lr with its BatchNorm statistics updated): what weights= did
before the recipe. The benchmarks are reported one by one, not averaged: a fine-tune is meant to move the target
set (CFP-FP) and to leave the others (LFW) where the loaded weights had them.
"""

from __future__ import annotations

from typing import Any

from elasticface.report.seeds import _difference, _pct, mean_std, paired

#: parts newer than some recorded runs: a summary without one ran with it off
LATER = {"wise_alpha": 1}
PLAIN = {"imprint_centers": False, "head_only_epochs": 0, "l2sp_alpha": 0, "backbone_lr_scale": 1,
         "freeze_backbone_bn": False, **LATER}


def is_plain(finetune: dict[str, Any] | None) -> bool:
    """Whether a run's recipe (summary.json's `finetune`) has every part off."""
    return finetune is not None and all(finetune.get(k, LATER.get(k)) == v for k, v in PLAIN.items())


def _by_seed(row: Any, bench: str) -> dict[Any, float]:
    return {s["seed"]: float(s["val/sets"][bench]) for s in row.summaries if s["val/sets"].get(bench) is not None}


def start_accuracies(rows: list[Any]) -> dict[str, float]:
    """The loaded weights' accuracy per benchmark before the first step, as the runs measured it."""
    found: dict[str, float] = {}
    for row in rows:
        for s in row.summaries:
            found.update(s.get("baseline/start_acc_per_set") or {})
    return found


def finetune_table(rows: list[Any], benchmarks: list[str], varying: list[str]) -> list[str]:
    """Markdown lines for the rows whose runs all fine-tuned (`table.Row`s with their summaries); [] if none."""
    tuned = [r for r in rows if r.summaries and all(s.get("finetune") for s in r.summaries)]
    if not tuned:
        return []
    plain = next((r for r in tuned if all(is_plain(s["finetune"]) for s in r.summaries)), None)
    start = start_accuracies(tuned)
    head = ["row", "seeds"]
    for bench in benchmarks:
        head += [bench] + ([f"{bench} − plain"] if plain else [])
    lines = ["Final accuracy in % (mean ± std over seeds; in brackets the change from the loaded weights). The "
             "difference to plain fine-tuning is paired by seed: mean ± std, [95% interval], n; `*` where the "
             "interval excludes 0.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in tuned:
        cells = [r.label(varying), r.seed_list()]
        for bench in benchmarks:
            by_seed = _by_seed(r, bench)
            mean, std = mean_std(list(by_seed.values()))
            change = f" ({100 * (mean - start[bench]):+.2f})" if bench in start else ""
            cells.append(_pct(mean, std) + change)
            if plain:
                d = None if r is plain else paired(by_seed, _by_seed(plain, bench))
                cells.append("—" if d is None else _difference(d))
        lines.append("| " + " | ".join(cells) + " |")
    if start:
        cells = ["loaded weights, before the first step", ""]
        for bench in benchmarks:
            cells += [f"{100 * start[bench]:.2f}" if bench in start else ""] + ([""] if plain else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines
