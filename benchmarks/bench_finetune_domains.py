"""Which fine-tuning candidate should `weights=` run: fine-tunes of one released model on several domains and seeds,
tabled per domain and candidate, and the default chosen by docs/finetune.md's rule.

    python benchmarks/bench_finetune_domains.py <root> [--baseline recipe]

<root>/<domain>/<candidate>/seed<k>/ holds one fine-tune each, run as typed with its folder as the run folder:

    python train.py experiment=cfp_finetune data.root=<split> weights=<file> <candidate's keys> seed=<k> \
        hydra.run.dir=<root>/<domain>/<candidate>/seed<k>

A run's gain is its final verification accuracy minus the loaded weights' on the same sets (the start baseline the
run scores before its first step; a run that did not score it, `start_baseline=false`, takes its domain's from
another run of the same file), in points. A run without summary.json whose train.log says `training diverged` is
counted as diverged; one with neither is unfinished and left out (said).

The rule: a domain's seed spread is the largest sample standard deviation of any candidate's gains there. The
default is the candidate with the best mean gain over the domains among those that never diverged, finished
MIN_SEEDS seeds or more on every domain, and whose mean gain on each domain is within that domain's spread of the
best candidate's there. Where none qualifies, `--baseline` (today's default) stays, and the line says so.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

DIVERGED = "training diverged"
#: finished seeds a candidate needs on every domain to be the default
MIN_SEEDS = 3
#: points: a loss equal to the spread up to float rounding of the accuracies is within it
TIE = 1e-9
#: train.log's lines that close a verification pass: the loaded weights' score, each validation's
VERIFY_SECONDS = (re.compile(r"baseline start: .* images in ([\d.]+) s$"),
                  re.compile(r"verifying at step \d+: 100%, .*, ([\d.]+) s$"))


@dataclass
class Cell:
    """One candidate on one domain: the gains of its finished seeds, its diverged seeds, the seconds per run."""
    gains: dict[int, float] = field(default_factory=dict)
    finals: dict[int, float] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    verify_seconds: dict[int, float] = field(default_factory=dict)  # the start baseline and the final verification
    diverged: list[int] = field(default_factory=list)
    unfinished: list[int] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.gains.values()) if self.gains else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.gains.values()) if len(self.gains) > 1 else 0.0


def _start(summary: dict) -> float | None:
    per_set = summary.get("baseline/start_acc_per_set") or {}
    finals = summary.get("val/sets") or {}
    values = [per_set[name] for name in finals if per_set.get(name) is not None]
    return statistics.fmean(values) if values and len(values) == len(finals) else None


def verification_seconds(log: Path) -> float:
    """Seconds the run's verification passes took, read off its train.log (nan without one)."""
    if not log.is_file():
        return math.nan
    return sum(float(m.group(1)) for line in log.read_text(errors="replace").splitlines()
               for pattern in VERIFY_SECONDS if (m := pattern.search(line)))


def _final(summary: dict) -> float | None:
    final = (summary.get("val/acc_mean") or {}).get("final")
    return None if final is None or not math.isfinite(float(final)) else float(final)


def read_cells(root: Path) -> dict[str, dict[str, Cell]]:
    """{domain: {candidate: Cell}} from `root/<domain>/<candidate>/seed<k>/`."""
    cells: dict[str, dict[str, Cell]] = {}
    starts: dict[str, float] = {}
    pending: list[tuple[str, Cell, int, float]] = []
    for seed_dir in sorted(root.glob("*/*/seed*")):
        domain, candidate = seed_dir.parent.parent.name, seed_dir.parent.name
        seed = int(seed_dir.name[len("seed"):])
        cell = cells.setdefault(domain, {}).setdefault(candidate, Cell())
        summary_file = seed_dir / "summary.json"
        if not summary_file.is_file():
            log = seed_dir / "train.log"
            diverged = log.is_file() and DIVERGED in log.read_text(errors="replace")
            (cell.diverged if diverged else cell.unfinished).append(seed)
            continue
        summary = json.loads(summary_file.read_text())
        final = _final(summary)
        if final is None or summary.get("weights_finite") is False:
            cell.diverged.append(seed)
            continue
        start = _start(summary)
        if start is not None:
            starts.setdefault(domain, start)
        cell.finals[seed] = final
        cell.seconds[seed] = float(summary.get("train_seconds") or math.nan)
        cell.verify_seconds[seed] = verification_seconds(seed_dir / "train.log")
        pending.append((domain, cell, seed, start))
    for domain, cell, seed, start in pending:
        start = start if start is not None else starts.get(domain)
        if start is None:
            raise SystemExit(f"{root / domain}: no run scored the loaded weights (start baseline); run one without "
                             "start_baseline=false")
        cell.gains[seed] = 100 * (cell.finals[seed] - start)
    return cells


def spreads(cells: dict[str, dict[str, Cell]]) -> dict[str, float]:
    """A domain's seed spread: the largest sample standard deviation of a candidate's gains there."""
    return {domain: max((cell.std for cell in row.values()), default=0.0) for domain, row in cells.items()}


def choose_default(cells: dict[str, dict[str, Cell]], min_seeds: int = MIN_SEEDS) -> tuple[str | None, dict[str, str]]:
    """The candidate the rule makes the default (None: none qualifies), and why each other one does not."""
    domains = sorted(cells)
    spread = spreads(cells)
    candidates = sorted({c for row in cells.values() for c in row})
    best = {d: max((c.mean for c in cells[d].values() if c.gains), default=math.nan) for d in domains}
    why_not: dict[str, str] = {}
    qualified = []
    for name in candidates:
        missing = [d for d in domains if name not in cells[d] or not cells[d][name].gains]
        few = [d for d in domains if d not in missing and len(cells[d][name].gains) < min_seeds]
        diverged = [d for d in domains if name in cells[d] and cells[d][name].diverged]
        beyond = [d for d in domains if d not in missing and best[d] - cells[d][name].mean > spread[d] + TIE]
        if missing:
            why_not[name] = f"no finished run on {', '.join(missing)}"
        elif diverged:
            why_not[name] = f"diverged on {', '.join(diverged)}"
        elif few:
            why_not[name] = (f"{', '.join(f'{d}: {len(cells[d][name].gains)} seed(s)' for d in few)}; the rule asks "
                             f"for {min_seeds} or more on every domain")
        elif beyond:
            why_not[name] = "; ".join(f"{d}: {cells[d][name].mean - best[d]:+.2f} against the best, beyond the "
                                      f"seed spread {spread[d]:.2f}" for d in beyond)
        else:
            qualified.append(name)
    mean_gain = {name: statistics.fmean(cells[d][name].mean for d in domains) for name in qualified}
    chosen = max(qualified, key=lambda n: mean_gain[n]) if qualified else None
    for name in qualified:
        if name != chosen:
            why_not[name] = f"mean gain {mean_gain[name]:+.2f} against {mean_gain[chosen]:+.2f}"
    return chosen, why_not


def table(cells: dict[str, dict[str, Cell]]) -> list[str]:
    spread = spreads(cells)
    lines = ["| domain | candidate | seeds | accuracy | gain (points) | per seed | diverged | fit s per run | "
             "of which verification |", "|---|---|---|---|---|---|---|---|---|"]
    for domain in sorted(cells):
        for name, cell in sorted(cells[domain].items()):
            per_seed = ", ".join(f"{cell.gains[s]:+.2f}" for s in sorted(cell.gains))
            accuracy = statistics.fmean(cell.finals.values()) * 100 if cell.finals else math.nan
            seconds = statistics.fmean(cell.seconds.values()) if cell.seconds else math.nan
            verify = statistics.fmean(cell.verify_seconds.values()) if cell.verify_seconds else math.nan
            lines.append(f"| {domain} (spread {spread[domain]:.2f}) | {name} | {len(cell.gains)} | {accuracy:.2f} | "
                         f"{cell.mean:+.2f} ± {cell.std:.2f} | {per_seed} | {len(cell.diverged)} | {seconds:.0f} | "
                         f"{verify:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--baseline", default="recipe", help="today's default, kept when no candidate qualifies")
    parser.add_argument("--min-seeds", type=int, default=MIN_SEEDS, help="finished seeds per domain to qualify")
    args = parser.parse_args(argv)
    cells = read_cells(args.root)
    print("\n".join(table(cells)))
    for domain, row in sorted(cells.items()):
        for name, cell in sorted(row.items()):
            if cell.unfinished:
                print(f"unfinished, left out: {domain}/{name} seed(s) {cell.unfinished}")
    chosen, why_not = choose_default(cells, args.min_seeds)
    for name, why in sorted(why_not.items()):
        print(f"not the default: {name}: {why}")
    print(f"default: {chosen}" if chosen else f"default: none qualifies; {args.baseline} stays")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
