"""The paper's toy example (Sec. II, Fig. 2): a 2-D embedding of a few identities on the unit circle.

With C classes and 2-D embeddings the ideal layout spaces the class centres 360°/C apart (45° for
8 identities) and keeps each class's embeddings tight around its centre. This module measures both on a
trained model's embeddings and draws the paper's picture; `callbacks/toy_2d.py` runs it at the end of
training and the toy notebook reads what it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULT_FILE = "toy_2d.json"
ARRAY_FILES = {"embeddings": "toy_2d_embeddings.npy", "labels": "toy_2d_labels.npy", "centres": "toy_2d_centres.npy"}
FIGURE_FILE = "toy_2d.png"


def angles_deg(vectors: np.ndarray) -> np.ndarray:
    """Direction of each row of a [N, 2] array, in degrees in [0, 360)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[1] != 2:
        raise ValueError(f"expected 2-D vectors of shape [N, 2], got {list(vectors.shape)}")
    return np.degrees(np.arctan2(vectors[:, 1], vectors[:, 0])) % 360.0


def wrap_deg(angles: np.ndarray) -> np.ndarray:
    """Angle differences mapped to [-180, 180)."""
    return (np.asarray(angles) + 180.0) % 360.0 - 180.0


def toy_geometry(embeddings: np.ndarray, labels: np.ndarray, centres: np.ndarray,
                 identity_variation: Sequence[float] | None = None) -> dict[str, Any]:
    """Angles between consecutive class centres and the angular spread of each class.

    Centres are taken in the order they lie around the circle, so ``consecutive_gaps_deg`` always sums
    to 360°; their deviation from 360°/C says how evenly the classes share the circle. A class's spread
    is the population standard deviation of its embeddings' angles (measured relative to its centre, so
    a class straddling 0° is not split). ``overlap_fraction`` is the share of embeddings at a smaller angle
    to another class's centre than to their own: what a nearest-centre classifier would get wrong. With
    ``identity_variation`` (one factor per class) the spread is also averaged per variation level: the toy
    example's low- and high-variation identities.
    """
    labels = np.asarray(labels)
    centre_angles = angles_deg(centres)
    num_classes = len(centre_angles)
    if num_classes < 2:
        raise ValueError(f"the toy example needs at least 2 class centres (data.train_dataset.num_identities), "
                         f"got {num_classes}")
    if labels.min(initial=0) < 0 or labels.max(initial=0) >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), the number of centres")
    order = np.argsort(centre_angles)
    sorted_angles = centre_angles[order]
    gaps = np.diff(np.append(sorted_angles, sorted_angles[0] + 360.0))
    ideal = 360.0 / num_classes
    deviations = wrap_deg(angles_deg(embeddings) - centre_angles[labels])
    class_std = np.array([deviations[labels == k].std() if np.any(labels == k) else np.nan for k in range(num_classes)])
    class_offset = np.array(
        [deviations[labels == k].mean() if np.any(labels == k) else np.nan for k in range(num_classes)]
    )
    # overlap: an embedding at a smaller angle to another class's centre than to its own
    to_centres = np.abs(wrap_deg(angles_deg(embeddings)[:, None] - centre_angles[None, :]))
    own = to_centres[np.arange(len(labels)), labels]
    to_centres[np.arange(len(labels)), labels] = np.inf
    overlap = float(np.mean(to_centres.min(axis=1) < own)) if len(labels) else float("nan")
    result: dict[str, Any] = {
        "num_classes": num_classes,
        "num_embeddings": int(len(labels)),
        "ideal_gap_deg": ideal,
        "centre_angles_deg": centre_angles.tolist(),
        "classes_around_circle": order.tolist(),
        "consecutive_gaps_deg": gaps.tolist(),
        "gap_min_deg": float(gaps.min()),
        "gap_max_deg": float(gaps.max()),
        "gap_mean_abs_error_deg": float(np.abs(gaps - ideal).mean()),
        "class_std_deg": class_std.tolist(),
        "class_offset_deg": class_offset.tolist(),
        "mean_class_std_deg": float(np.nanmean(class_std)),
        "overlap_fraction": overlap,
    }
    if identity_variation is not None:
        variation = np.asarray(identity_variation, dtype=np.float64)
        if len(variation) != num_classes:
            raise ValueError(f"identity_variation has {len(variation)} factors for {num_classes} classes")
        result["identity_variation"] = variation.tolist()
        result["mean_class_std_deg_by_variation"] = {
            f"{level:g}": float(np.nanmean(class_std[variation == level])) for level in np.unique(variation)
        }
    return result


def write_toy_results(output_dir: Path, embeddings: np.ndarray, labels: np.ndarray, centres: np.ndarray,
                      geometry: dict[str, Any], title: str = "") -> Path:
    """toy_2d.json, the arrays as .npy and the picture (toy_2d.png) in ``output_dir``; returns the JSON path."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for key, array in (("embeddings", embeddings), ("labels", labels), ("centres", centres)):
        np.save(output_dir / ARRAY_FILES[key], np.asarray(array))
    path = output_dir / RESULT_FILE
    path.write_text(json.dumps({"title": title, **geometry}, indent=2))
    figure = toy_figure(embeddings, labels, centres, geometry, title)
    figure.savefig(output_dir / FIGURE_FILE, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path


def read_toy_results(run_dir: Path) -> dict[str, Any]:
    """What :func:`write_toy_results` wrote in one run directory: the JSON's keys plus the three arrays."""
    run_dir = Path(run_dir)
    path = run_dir / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no toy example results (train with experiment=toy_2d)")
    result = json.loads(path.read_text())
    result.update({key: np.load(run_dir / name) for key, name in ARRAY_FILES.items()})
    result["run_dir"] = str(run_dir)
    return result


def toy_figure(embeddings: np.ndarray, labels: np.ndarray, centres: np.ndarray, geometry: dict[str, Any],
               title: str = "", ax: Any = None) -> Any:
    """The paper's Fig. 2 picture: normalised embeddings on the unit circle, one colour per identity,
    class centres as rays; low-variation identities as dots, high-variation ones as crosses."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    own_figure = ax is None
    if own_figure:
        figure, ax = plt.subplots(figsize=(4.2, 4.6))
    else:
        figure = ax.figure
    labels = np.asarray(labels)
    unit = np.asarray(embeddings, dtype=np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True).clip(min=1e-12)
    centre_dirs = np.asarray(centres, dtype=np.float64)
    centre_dirs = centre_dirs / np.linalg.norm(centre_dirs, axis=1, keepdims=True).clip(min=1e-12)
    variation = geometry.get("identity_variation")
    high = set(np.flatnonzero(np.asarray(variation) > np.min(variation)).tolist()) if variation else set()
    colours = plt.get_cmap("tab10")
    circle = np.linspace(0, 2 * np.pi, 361)
    ax.plot(np.cos(circle), np.sin(circle), color="0.8", linewidth=0.8, zorder=0)
    # a small radial jitter per class keeps overlapping classes visible, as in the paper's figure
    for k in range(len(centre_dirs)):
        points = unit[labels == k] * (1.0 + 0.015 * (k % 4))
        ax.scatter(points[:, 0], points[:, 1], s=6, alpha=0.5, color=colours(k % 10),
                   marker="x" if k in high else "o", linewidths=0.6)
        ax.plot([0, 1.18 * centre_dirs[k, 0]], [0, 1.18 * centre_dirs[k, 1]], color=colours(k % 10), linewidth=1.2)
        ax.annotate(str(k), 1.28 * centre_dirs[k], ha="center", va="center", fontsize=8)
    ax.set_aspect("equal")
    ax.set_xlim(-1.4, 1.4)
    ax.set_ylim(-1.4, 1.4)
    ax.set_xticks([])
    ax.set_yticks([])
    gaps = geometry["consecutive_gaps_deg"]
    ax.set_xlabel(
        f"centre gaps {min(gaps):.1f}°–{max(gaps):.1f}° (ideal {geometry['ideal_gap_deg']:.0f}°)\n"
        f"mean class std {geometry['mean_class_std_deg']:.2f}°",
        fontsize=8,
    )
    if title:
        ax.set_title(title, fontsize=9)
    if own_figure:
        figure.tight_layout()
    return figure


#: what the sweep summary reports per head, as (key in a run's results, column title)
SUMMARY_METRICS = (("gap_error_deg", r"mean \|gap − ideal\| (°)"),
                   ("worst_gap_error_deg", r"largest \|gap − ideal\| (°)"),
                   ("std_low_deg", "std, low-variation ids (°)"), ("std_high_deg", "std, high-variation ids (°)"),
                   ("overlap_pct", "overlap (%)"))
SWEEP_FIGURE_FILE = "toy_2d_heads.png"
#: a run whose smallest centre gap is under this fraction of the ideal has merged centres: two or more
#: identities share one direction (a 2-D run that collapsed), which no gap or spread average describes
MERGED_FRACTION = 0.25
#: the toy's convergence criterion (issue 22): every centre gap within the ideal ± this many degrees
GAP_TOLERANCE_DEG = 5.0


def _job_order(job: Path) -> tuple[float, str]:
    """Hydra's job number first (``10_...`` after ``9_...``), then the name."""
    number = job.name.split("_", 1)[0]
    return (int(number) if number.isdigit() else float("inf"), job.name)


def read_toy_sweep(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job of a multirun that wrote toy results, with its head, seed and steps (from summary.json)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"{sweep_dir}: no such sweep directory")
    runs = []
    for job in sorted((p.parent for p in sweep_dir.glob(f"*/{RESULT_FILE}")), key=_job_order):
        result = read_toy_results(job)
        summary_path = job / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        result.update(head=summary.get("head", job.name), seed=summary.get("seed"), steps=summary.get("global_step"),
                      train_seconds=summary.get("train_seconds"))
        by_level = {float(k): v for k, v in result.get("mean_class_std_deg_by_variation", {}).items()}
        ideal = result["ideal_gap_deg"]
        worst = max(result["gap_max_deg"] - ideal, ideal - result["gap_min_deg"])
        result.update(gap_error_deg=result["gap_mean_abs_error_deg"], worst_gap_error_deg=worst,
                      within_tolerance=worst <= GAP_TOLERANCE_DEG,
                      std_low_deg=by_level[min(by_level)] if by_level else float("nan"),
                      std_high_deg=by_level[max(by_level)] if len(by_level) > 1 else float("nan"),
                      overlap_pct=100.0 * result.get("overlap_fraction", float("nan")),
                      merged=result["gap_min_deg"] < MERGED_FRACTION * ideal)
        runs.append(result)
    if not runs:
        raise FileNotFoundError(
            f"{sweep_dir}: no job wrote {RESULT_FILE} (train with python train.py -m experiment=toy_2d ...)"
        )
    return runs


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


def toy_sweep_figure(runs: Sequence[dict[str, Any]], columns: int = 3) -> Any:
    """The runs' pictures side by side (the paper's Fig. 2 shows ArcFace, ElasticFace-Arc and -Arc+),
    `columns` to a row; each run's ``title`` (else its head and seed) above its panel."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    columns = max(1, min(columns, len(runs)))
    rows = -(-len(runs) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.0 * columns, 4.8 * rows), squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs):
        title = run.get("title") or f"{run.get('head', '')} seed {run.get('seed', '')}".strip()
        toy_figure(run["embeddings"], run["labels"], run["centres"], run, title=title, ax=ax)
    figure.tight_layout()
    return figure


def newest_toy_sweep(bases: Sequence[Path] = (Path.cwd(),)) -> Path | None:
    """The newest multirun under ``<base>/logs/toy_2d/multiruns`` that holds toy results."""
    for base in bases:
        sweeps = sorted(p for p in (Path(base) / "logs" / "toy_2d" / "multiruns").glob("*")
                        if any(p.glob(f"*/{RESULT_FILE}")))
        if sweeps:
            return sweeps[-1]
    return None


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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m elasticface.eval.toy_2d [SWEEP_DIR] [--seed N]``: the per-head summary over seeds, and the
    heads side by side for one seed (toy_2d_heads.png in the sweep directory)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m elasticface.eval.toy_2d", description=main.__doc__)
    parser.add_argument("sweep_dir", type=Path, nargs="?", default=None,
                        help="a multirun of experiment=toy_2d (default: the newest under ./logs/toy_2d/multiruns)")
    parser.add_argument("--seed", type=int, default=None, help="the seed drawn in the figure (default: the first)")
    args = parser.parse_args(argv)
    sweep_dir = args.sweep_dir or newest_toy_sweep()
    if sweep_dir is None:
        print("error: no toy sweep under ./logs/toy_2d/multiruns; name one, or train: "
              "python train.py -m experiment=toy_2d head=arcface,elastic_arc,elastic_arc_plus", file=sys.stderr)
        return 2
    try:
        runs = read_toy_sweep(sweep_dir)
    except (FileNotFoundError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else runs[0]["seed"]
    shown = [r for r in runs if r["seed"] == seed]
    if not shown:
        print(f"error: --seed {seed}: no job of {sweep_dir} has it (seeds: {sorted({r['seed'] for r in runs})})",
              file=sys.stderr)
        return 2
    print(f"sweep: {sweep_dir}")
    print(format_sweep_summary(runs))
    import matplotlib.pyplot as plt

    figure = toy_sweep_figure([{**r, "title": f"{r['head']} (seed {seed})"} for r in shown])
    path = Path(sweep_dir) / SWEEP_FIGURE_FILE
    figure.savefig(path, dpi=100)
    plt.close(figure)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
