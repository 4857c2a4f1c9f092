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
    a class straddling 0° is not split). With ``identity_variation`` (one factor per class) the spread is
    also averaged per variation level: the toy example's low- and high-variation identities.
    """
    labels = np.asarray(labels)
    centre_angles = angles_deg(centres)
    num_classes = len(centre_angles)
    if labels.min(initial=0) < 0 or labels.max(initial=0) >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), the number of centres")
    order = np.argsort(centre_angles)
    sorted_angles = centre_angles[order]
    gaps = np.diff(np.append(sorted_angles, sorted_angles[0] + 360.0))
    ideal = 360.0 / num_classes
    deviations = wrap_deg(angles_deg(embeddings) - centre_angles[labels])
    class_std = np.array([deviations[labels == k].std() if np.any(labels == k) else np.nan for k in range(num_classes)])
    class_offset = np.array([deviations[labels == k].mean() if np.any(labels == k) else np.nan for k in range(num_classes)])
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
    figure.savefig(output_dir / FIGURE_FILE, dpi=120, bbox_inches="tight")
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

    if ax is None:
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
    return figure
