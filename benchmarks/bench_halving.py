"""What successive halving would have cost and chosen, against the full grid it replaces, on sweeps run in full.

    python benchmarks/bench_halving.py <sweep dir> [<sweep dir> ...] [--eta 2 3] [--first 1 2]

Each sweep dir is a full grid (one seed) run with a validation every epoch (`trainer.check_val_every_n_epoch=1`),
e.g. `python train.py -m hparams_search=paper_table1 experiment=sweep_demo seed=1 trainer.check_val_every_n_epoch=1`.
Because a job that halving stops and continues is exactly the job that was never stopped (the schedule is the full
run's, the resume exact: tests/test_halving.py), halving's rounds can be replayed from the full jobs' accuracy at
each epoch (their CSV logs), for any eta and first budget, with the sweeper's own rule (elasticface.sweeps.halving).

Printed per setting: the compute (job-epochs trained against the full grid's, the baseline), and the agreement with
the full grid ranked on the same metric at the last epoch: the same winner (halving's best has the full grid's best
value: ties count), the same top 3 (halving's three best each have at least the full grid's third-best value), and
Kendall's tau-b between halving's order of all jobs (those that went further first, each round's by its metric) and
the jobs' final values; in how many seeds each held. The default rule of docs/sweeps.md: the cheapest setting that
keeps the winner and the top 3 in every seed.
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import kendalltau

from elasticface.sweeps.halving import Plan, kept, rank


@dataclass
class Job:
    folder: str
    by_epoch: dict[int, float]  # epoch (1-based) -> the metric after it


def read_jobs(sweep: Path, metric: str) -> list[Job]:
    """Every finished job of a full sweep with its metric after each epoch (its CSV logs, resumed parts included)."""
    jobs = []
    for summary in sorted(sweep.glob("*/summary.json")):
        folder = summary.parent
        by_epoch: dict[int, float] = {}
        for log in sorted(folder.glob("csv/version_*/metrics.csv")):
            for row in csv.DictReader(log.open()):
                if row.get(metric):
                    by_epoch[int(row["epoch"]) + 1] = float(row[metric])
        final = json.loads(summary.read_text())
        if final.get("stopped_at_epoch") is not None:
            raise SystemExit(f"{folder}: stopped by halving; this tool replays full grids only")
        jobs.append(Job(folder.name, by_epoch))
    if not jobs:
        raise SystemExit(f"{sweep}: no finished job (*/summary.json)")
    return jobs


def budgets(eta: int, first: int, max_epochs: int) -> tuple[int, ...]:
    out, budget = [], first
    while budget < max_epochs:
        out.append(budget)
        budget *= eta
    return tuple(out + [max_epochs])


def replay(jobs: list[Job], plan: Plan) -> tuple[list[int], int]:
    """Halving's final order of the jobs (best first) and the job-epochs it trains, by the sweeper's rule."""
    alive, start, spent, order_by_round = list(range(len(jobs))), 0, 0, []
    for budget in plan.budgets:
        spent += len(alive) * (budget - start)
        ranked = rank({i: jobs[i].by_epoch.get(budget) for i in alive})
        order_by_round.append(ranked)
        alive = ranked if budget == plan.max_epochs else ranked[:kept(len(ranked), plan.eta)]
        start = budget
    order: list[int] = []
    for ranked in reversed(order_by_round):
        order += [i for i in ranked if i not in order]
    return order, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="full-grid sweep folders, one per seed")
    parser.add_argument("--eta", nargs="+", type=int, default=[2, 3])
    parser.add_argument("--first", nargs="+", type=int, default=[1, 2], help="first budgets in epochs")
    parser.add_argument("--metric", default="val/acc_mean")
    args = parser.parse_args()
    grids = [read_jobs(s, args.metric) for s in args.sweeps]
    max_epochs = max(max(j.by_epoch) for j in grids[0])
    for sweep, jobs in zip(args.sweeps, grids):
        short = [j.folder for j in jobs if set(j.by_epoch) != set(range(1, max_epochs + 1))]
        if short:
            raise SystemExit(f"{sweep}: {short[0]} has no {args.metric} after some epoch (validate every epoch)")
    print(f"{len(grids)} seed(s), {len(grids[0])} jobs each, {max_epochs} epochs; ranked on {args.metric}")
    print("| eta | first epochs | budgets | job-epochs (ratio to the full grid) | same winner | same top 3 "
          "| Kendall's tau (mean, min) |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for eta in args.eta:
        for first in args.first:
            if first >= max_epochs:
                continue
            plan = Plan(eta, budgets(eta, first, max_epochs), args.metric)
            winners, tops, taus, spent_all, full_all = 0, 0, [], 0, 0
            for jobs in grids:
                final = [j.by_epoch[max_epochs] for j in jobs]
                third = sorted(final, reverse=True)[2]
                order, spent = replay(jobs, plan)
                winners += final[order[0]] == max(final)  # a job tied with the full grid's best is its winner too
                tops += all(final[i] >= third for i in order[:3])
                taus.append(kendalltau([-order.index(i) for i in range(len(jobs))], final).statistic)
                spent_all, full_all = spent_all + spent, full_all + len(jobs) * max_epochs
            n = len(grids)
            rows.append((spent_all / full_all, eta, first, winners == n and tops == n))
            print(f"| {eta} | {first} | {'/'.join(map(str, plan.budgets))} | {spent_all // n} of {full_all // n} "
                  f"({spent_all / full_all:.2f}) | {winners} of {n} | {tops} of {n} | "
                  f"{sum(taus) / n:.2f}, {min(taus):.2f} |")
    keeping = sorted(r for r in rows if r[3])
    print("cheapest setting that keeps the winner and the top 3 in every seed: "
          + (f"eta={keeping[0][1]} first_epochs={keeping[0][2]} ({keeping[0][0]:.2f} of the full grid's compute)"
             if keeping else "none (halving stays off by default)"))


if __name__ == "__main__":
    main()
