"""Every PNG the project writes, at its smallest and largest realistic size: nothing drawn outside the figure.

A reader sees the saved canvas only, so a legend, title, tick or axis label that extends past the figure's
edge is cut off in the file. Each test builds the figure the project writes, draws it, and checks the window
extent of every axes (with its tick labels, titles and annotations), every figure legend and every figure
text against the figure's own box.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from elasticface.eval.plots import roc_figure, score_histogram  # noqa: E402
from elasticface.eval.toy_2d.figures import toy_figure, toy_sweep_figure  # noqa: E402
from elasticface.eval.toy_2d.geometry import toy_geometry  # noqa: E402
from elasticface.report.plot import accuracy_vs_sigma_figure  # noqa: E402
from elasticface.report.table import Report, Row  # noqa: E402

TOLERANCE_PX = 1.0


def cut_off(fig: Figure) -> list[str]:
    """What of `fig` lies outside its canvas, as 'what: box' strings (empty: nothing is cut off)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    parts = [(f"axes {ax.get_title()!r}", ax.get_tightbbox(renderer)) for ax in fig.axes]
    parts += [
        (f"legend {[t.get_text() for t in leg.get_texts()]}", leg.get_window_extent(renderer)) for leg in fig.legends
    ]
    parts += [
        (f"legend of {ax.get_title()!r}", ax.get_legend().get_window_extent(renderer))
        for ax in fig.axes
        if ax.get_legend() is not None
    ]
    parts += [(f"text {t.get_text()!r}", t.get_window_extent(renderer)) for t in fig.texts if t.get_text()]
    return [
        f"{what}: x {box.x0:.0f}..{box.x1:.0f}, y {box.y0:.0f}..{box.y1:.0f} "
        f"outside the canvas {canvas.width:.0f}x{canvas.height:.0f}"
        for what, box in parts
        if box is not None
        and (
            box.x0 < canvas.x0 - TOLERANCE_PX
            or box.y0 < canvas.y0 - TOLERANCE_PX
            or box.x1 > canvas.x1 + TOLERANCE_PX
            or box.y1 > canvas.y1 + TOLERANCE_PX
        )
    ]


def test_the_check_sees_a_legend_off_the_edge():
    """The bug the issue measured, built by hand: one row of 6 long entries under a 7.2-inch figure."""
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.4))
    for k in range(6):
        axes[0].plot([0, 1], [k, k], label=f"ElasticFace-Arc+ m=0.5 line {k}")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=6)
    problems = cut_off(fig)
    plt.close(fig)
    assert problems and all("legend" in p for p in problems)


def report_of(
    benchmarks: list[str],
    families: list[tuple[str, float | None, list[float | None]]],
    extra: dict[str, list[str]] | None = None,
) -> Report:
    """A report as build_report makes one: a row per (family, m, σ[, extra value]), three seeds each."""
    rows = []
    rng = np.random.default_rng(0)
    for family, m, sigmas in families:
        for values in zip(*extra.values()) if extra else [()]:
            for sigma in sigmas:
                runs = [{b: 0.9 + 0.05 * rng.random() for b in benchmarks} for _ in range(3)]
                rows.append(
                    Row(
                        family=family,
                        m=m,
                        sigma=sigma,
                        extra=dict(zip(extra or {}, values)),
                        seeds=[1, 2, 3],
                        runs=runs,
                    )
                )
    return Report(benchmarks=benchmarks, rows=rows, varying=list(extra or {}), unfinished=[], notes=[])


ELASTIC_SIGMAS = [0.0125, 0.0175, 0.025, 0.05]
TABLE_I = [
    ("arcface", 0.45, [None]),
    ("arcface", 0.5, [None]),
    ("arcface", 0.55, [None]),
    ("elastic_arc", 0.5, ELASTIC_SIGMAS),
    ("elastic_arc_plus", 0.5, ELASTIC_SIGMAS),
]
TABLE_I_AND_II = TABLE_I + [
    ("cosface", 0.3, [None]),
    ("cosface", 0.35, [None]),
    ("cosface", 0.4, [None]),
    ("elastic_cos", 0.35, ELASTIC_SIGMAS),
    ("elastic_cos_plus", 0.35, ELASTIC_SIGMAS),
]


@pytest.mark.parametrize(
    "report",
    [
        pytest.param(report_of(["lfw"], [("arcface", 0.5, [None])]), id="one benchmark, one line"),
        pytest.param(report_of(["lfw"], TABLE_I), id="Table I on one benchmark (the measured bug)"),
        pytest.param(
            report_of(
                ["lfw", "agedb_30", "calfw", "cfp_fp", "cplfw"],
                TABLE_I_AND_II,
                extra={"backbone": ["iresnet50", "mobilefacenet_large"]},
            ),
            id="both tables, five benchmarks, a varying backbone",
        ),
    ],
)
def test_accuracy_vs_sigma_fits(report):
    fig = accuracy_vs_sigma_figure(report)
    try:
        assert cut_off(fig) == []
        # every configuration is in the legend
        assert len(fig.legends[0].get_texts()) == len({(r.family, r.m, *r.extra.values()) for r in report.rows})
    finally:
        plt.close(fig)


def ring(num_classes: int, per_class: int = 20, spread_deg: float = 5.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(num_classes)
    centre_deg = np.arange(num_classes) * 360.0 / num_classes
    labels = np.repeat(np.arange(num_classes), per_class)
    angles = np.radians(centre_deg[labels] + rng.normal(0, spread_deg, len(labels)))
    centres = np.stack([np.cos(np.radians(centre_deg)), np.sin(np.radians(centre_deg))], axis=1)
    return np.stack([np.cos(angles), np.sin(angles)], axis=1), labels, centres


@pytest.mark.parametrize("num_classes", [2, 8, 20])
def test_toy_figure_fits(num_classes):
    embeddings, labels, centres = ring(num_classes)
    variation = [0.25] * (num_classes // 2) + [1.0] * (num_classes - num_classes // 2)
    geometry = toy_geometry(embeddings, labels, centres, variation)
    fig = toy_figure(embeddings, labels, centres, geometry, title="ElasticArcFace+ m=0.5 σ=0.0175 seed 5")
    try:
        assert cut_off(fig) == []
    finally:
        plt.close(fig)


@pytest.mark.parametrize("panels", [1, 3, 12])
def test_toy_sweep_figure_fits(panels):
    embeddings, labels, centres = ring(8)
    geometry = toy_geometry(embeddings, labels, centres, [0.25] * 4 + [1.0] * 4)
    runs = [
        {
            "embeddings": embeddings,
            "labels": labels,
            "centres": centres,
            **geometry,
            "title": f"elastic_arc_plus seed {k}",
        }
        for k in range(panels)
    ]
    fig = toy_sweep_figure(runs)
    try:
        assert len([ax for ax in fig.axes if ax.get_visible()]) == panels
        assert cut_off(fig) == []
    finally:
        plt.close(fig)


def curve(seed: int) -> tuple[np.ndarray, np.ndarray]:
    fpr = np.sort(np.r_[0.0, np.random.default_rng(seed).random(50), 1.0])
    return fpr, np.sqrt(fpr)


BENCHMARKS = ["lfw", "agedb_30", "calfw", "cfp_fp", "cplfw", "cfp_ff", "vgg2_fp", "my_own_pairs_from_a_folder"]


@pytest.mark.parametrize(
    "names, title",
    [
        pytest.param(["lfw"], "ROC", id="one curve, eval's title"),
        pytest.param(
            ["my_own_pairs_from_a_folder"],
            "my_own_pairs_from_a_folder ROC (step 295672)",
            id="callback's longest title",
        ),
        pytest.param(BENCHMARKS, "ROC (step 295672)", id="eight curves"),
    ],
)
def test_roc_figure_fits(names, title):
    fig = roc_figure({name: curve(k) for k, name in enumerate(names)}, title=title)
    try:
        assert cut_off(fig) == []
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "title, threshold",
    [
        pytest.param("lfw pair scores", None, id="eval's title"),
        pytest.param(
            "my_own_pairs_from_a_folder pair scores (acc 0.9983, step 295672)", 0.2875, id="callback's longest title"
        ),
    ],
)
def test_score_histogram_fits(title, threshold):
    rng = np.random.default_rng(0)
    fig = score_histogram(rng.normal(0.6, 0.1, 3000), rng.normal(0.0, 0.1, 3000), title=title, threshold=threshold)
    try:
        assert cut_off(fig) == []
    finally:
        plt.close(fig)
