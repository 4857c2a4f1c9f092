"""What `python eval.py` does: load a model, evaluate every requested benchmark, print and save a table."""

from __future__ import annotations

import csv
import json
import logging
import os
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from elasticface.eval.identification.tables import aligned
from elasticface.metrics.verification import check_pairs_for_folds
from elasticface.utils.config import ConfigError
from elasticface.utils.progress import Progress
from elasticface.utils.errors import BadValue, MissingPath

log = logging.getLogger(__name__)


NOTHING = ("nothing to evaluate: set data.val_root=<folder with .bin sets>, pairs_file=... image_root=..., "
           "ijb.root=..., megaface.root=... and/or tinyface.root=...")


def _output_dir(cfg: DictConfig, output_dir: str | None) -> str:
    if output_dir is None:
        try:
            from hydra.core.hydra_config import HydraConfig

            output_dir = HydraConfig.get().runtime.output_dir
        except ValueError:  # not under Hydra
            output_dir = os.getcwd()
    os.makedirs(output_dir, exist_ok=True)
    return output_dir


def verification_sets(cfg: DictConfig, image_size: int = 112) -> dict[str, Any]:
    """The pair sets named by the config, faces resized to `image_size`: `.bin` files under data.val_root and/or
    a pairs file."""
    from elasticface.data.pair_files import find_bin_sets, pairs_from_list

    sets: dict[str, Any] = {}
    data = cfg.get("data") or {}
    if data.get("val_root"):
        root = str(data.val_root)
        names = data.get("val_sets")
        if names is not None:
            names = [str(n) for n in names]
            present = [n for n in names if os.path.isfile(os.path.join(root, f"{n}.bin"))]
            missing = sorted(set(names) - set(present))
            if missing:
                log.warning("skipping verification sets not found in %s: %s", root, ", ".join(missing))
            if not present:
                raise MissingPath(f"none of data.val_sets={names} exists as {root}/<name>.bin")
            names = present
        sets.update(find_bin_sets(root, names, image_size=image_size))
    if cfg.get("pairs_file"):
        if not cfg.get("image_root"):
            raise BadValue("pairs_file= needs image_root= (the folder its paths are relative to)")
        pairs = pairs_from_list(str(cfg.pairs_file), str(cfg.image_root), cfg.get("pairs_name"), image_size=image_size)
        sets[pairs.name] = pairs
    return sets


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table; accuracies and TARs in percent."""
    columns = [c for c in _columns(rows) if c != "benchmark"]
    header = ["benchmark"] + columns
    lines = []
    for row in rows:
        cells = [str(row["benchmark"])]
        for c in columns:
            v = row.get(c)
            if v is None:
                cells.append("")
            elif c in ("acc", "acc_std") or c.startswith(("tar_at_far", "rank", "tpir_at_fpir")):
                cells.append(f"{100 * v:.2f}")
            elif isinstance(v, float):
                cells.append(f"{v:.4f}")
            else:
                cells.append(str(v))
        lines.append(cells)
    return "\n".join(aligned([header, *lines], rule=True))


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    return columns


def write_results(rows: list[dict[str, Any]], output_dir: str, meta: dict[str, Any],
                  blocks: dict[str, Any] | None = None) -> tuple[str, str]:
    """results.json ({"meta", "results": rows, **blocks}: a benchmark's detail such as "megaface") and results.csv."""
    from elasticface.utils.output_paths import atomic_path, atomic_write  # whole or not at all

    json_path = os.path.join(output_dir, "results.json")
    atomic_write(json_path, json.dumps({"meta": meta, "results": rows, **(blocks or {})}, indent=2))
    csv_path = os.path.join(output_dir, "results.csv")
    with atomic_path(csv_path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=_columns(rows))
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path


def backbone_option(cfg: DictConfig) -> dict[str, Any] | None:
    """The `model.backbone` config that `backbone=<option>` (or `model.backbone.name=`) put in, if any."""
    node = OmegaConf.select(cfg, "model.backbone")
    if not node or not node.get("name"):
        return None
    spec = OmegaConf.to_container(node, resolve=True)
    if spec.get("embedding_size") is None:
        spec.pop("embedding_size", None)
    return spec


def input_size(image_size: int | None, model: Any, model_file: str) -> int:
    """data.image_size, else the size a Lightning checkpoint's backbone was trained at (data.image_size=56 at
    training gives img_size 56), else insightface's 112."""
    if image_size:
        return int(image_size)
    trained = getattr(model, "image_size", None)
    if trained and trained != 112:
        log.info("%s: faces resized to %dx%d, the size its backbone was trained at (data.image_size=%d)",
                 model_file, trained, trained, trained)
    return int(trained or 112)


def evaluate(cfg: DictConfig, output_dir: str | None = None) -> list[dict[str, Any]]:
    """Evaluate and save; returns the table rows (one dict per benchmark)."""
    from elasticface.eval.embed import load_model_file, one_model_file
    from elasticface.eval.embedding_loop import evaluate_pair_set, resolve_device

    output_dir = _output_dir(cfg, output_dir)
    ijb_cfg = cfg.get("ijb") or {}
    mf_cfg = cfg.get("megaface") or {}
    tf_cfg = cfg.get("tinyface") or {}
    data = cfg.get("data") or {}
    identification = ijb_cfg.get("root") or mf_cfg.get("root") or tf_cfg.get("root")
    if not data.get("val_root") and not cfg.get("pairs_file") and not identification:
        raise ConfigError(NOTHING)
    device = resolve_device(cfg.get("device", "auto"))
    # MegaFace from gen_megaface.py's feature files alone needs no model
    features_only = (bool(mf_cfg.get("features")) and not cfg.get("weights")
                     and not (data.get("val_root") or cfg.get("pairs_file") or ijb_cfg.get("root")
                              or tf_cfg.get("root")))
    model_file, model, image_size = None, None, 112
    if not features_only:
        model_file = one_model_file(cfg.get("weights"))
        model = load_model_file(model_file, device, backbone_option(cfg),
                                OmegaConf.select(cfg, "model.embedding_size"),
                                allow_torchscript=bool(cfg.get("allow_torchscript", False)),
                                channels_last=cfg.get("channels_last", "auto"))
        image_size = input_size(data.get("image_size"), model, model_file)
    sets = verification_sets(cfg, image_size)  # read once the model file is known to be usable
    check_pairs_for_folds(sets, int(cfg.num_folds))
    if not sets and not identification:
        raise ConfigError(NOTHING)
    kw = dict(batch_size=int(cfg.batch_size), flip=bool(cfg.flip), device=device, num_workers=int(cfg.num_workers))
    rows: list[dict[str, Any]] = []
    curves: dict[str, dict[str, np.ndarray]] = {}
    for name, pairs in sets.items():
        distinct = len(pairs.distinct_images())
        with Progress(f"{name}: embedding the {distinct:,} distinct faces of {pairs.num_pairs:,} pairs", distinct) \
                as progress:
            result, roc = evaluate_pair_set(model, pairs, num_folds=int(cfg.num_folds),
                                            far_target=float(cfg.far_target), progress=progress.advance, **kw)
            seconds = round(progress.done(), 2)
        log.info("%s: acc %.4f +- %.4f", name, result["acc"], result["acc_std"])
        rows.append({"benchmark": name, "pairs": int(pairs.num_pairs), **result, "seconds": seconds})
        curves[name] = roc
    blocks: dict[str, Any] = {}
    written: list[str] = []  # the files this run writes, named on its last line
    if ijb_cfg.get("root"):
        from elasticface.eval.identification.ijb_report import evaluate_ijb_config

        written += evaluate_ijb_config(model, ijb_cfg, image_size, kw, output_dir, rows, curves, blocks)
    if mf_cfg.get("root"):
        from elasticface.eval.identification.megaface_report import FIGURE, evaluate_megaface_config

        blocks["megaface"] = evaluate_megaface_config(model, mf_cfg, image_size, kw, output_dir, rows,
                                                      bool(cfg.get("plots", True)))
        written += [os.path.join(output_dir, FIGURE)] if cfg.get("plots", True) else []
    if tf_cfg.get("root"):
        from elasticface.eval.identification.tinyface_report import evaluate_tinyface_config

        blocks["tinyface"], figure = evaluate_tinyface_config(model, tf_cfg, image_size, kw, output_dir, rows,
                                                              bool(cfg.get("plots", True)))
        written += figure

    meta = {"weights": model_file, "flip": bool(cfg.flip), "config": OmegaConf.to_container(cfg, resolve=False)}
    written += write_results(rows, output_dir, meta, blocks)
    print(format_table(rows))
    from elasticface.eval.thresholds import store_thresholds

    stored = store_thresholds(output_dir, model_file, [r for r in rows if r["benchmark"] in sets], bool(cfg.flip))
    if stored:
        print(f"thresholds for elasticface-compare: {stored}")
        written.append(stored)
    if cfg.get("plots", True):
        written += _save_plots(curves, output_dir)
    print("results: " + " ".join(map(str, written)))  # every file this run wrote
    return rows


def _save_plots(curves: dict[str, dict[str, np.ndarray]], output_dir: str) -> list[str]:
    """roc.png over the pair sets and IJB 1:1, a score histogram per pair set; none without a curve (a MegaFace or
    1:N run alone has its own figure). Returns the files written."""
    if not curves:
        return []
    import matplotlib.pyplot as plt

    from elasticface.eval.plots import roc_figure, score_histogram

    written = [os.path.join(output_dir, "roc.png")]
    fig = roc_figure({n: (c["fpr"], c["tpr"]) for n, c in curves.items()}, title="ROC")
    fig.savefig(written[0])
    plt.close(fig)
    for name, c in curves.items():
        if "genuine" in c:
            written.append(os.path.join(output_dir, f"scores_{name}.png"))
            fig = score_histogram(c["genuine"], c["impostor"], title=f"{name} pair scores")
            fig.savefig(written[-1])
            plt.close(fig)
    return written
