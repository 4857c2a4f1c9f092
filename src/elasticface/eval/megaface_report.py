"""`python eval.py megaface.root=...`: the `megaface` config node run, printed, plotted and put into results.json.

results.json gets a `megaface` block keyed `raw` and `refined` (MegaFace and MegaFace (R)), each with `rank1` by
distractor count, `cmc` (rank 1 ... max_rank) by distractor count and `tar_at_far_1e-6` ... at the verification
set; `summary` counts what was scored and `problems` holds each line said about the testpack. The results table
gets one row per view, at the verification set (10^6 distractors on the full testpack).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from omegaconf import DictConfig

from elasticface.eval.megaface import DEFAULT_FARS, DEFAULT_SIZES, VIEWS, evaluate_megaface, table
from elasticface.eval.megaface_features import CLEAN_FOLDER, RAW_FOLDER, features_folder
from elasticface.metrics.roc import far_key

log = logging.getLogger(__name__)

NAMES = {"raw": "MegaFace", "refined": "MegaFace (R)"}
#: the figure of rank-1 by distractors, the CMC and the ROC of both views, in the output folder
FIGURE = "megaface.png"


def evaluate_megaface_config(model: Any, cfg: DictConfig, image_size: int, kw: dict[str, Any], output_dir: str,
                             rows: list[dict[str, Any]], plots: bool = True) -> dict[str, Any]:
    """Run the `megaface` node, append its table rows, save `megaface.png`; returns the results.json block."""
    fars = [float(f) for f in (cfg.get("fars") or DEFAULT_FARS)]
    start = time.perf_counter()
    result = evaluate_megaface(
        model, str(cfg.root), sizes=[int(s) for s in (cfg.get("sizes") or DEFAULT_SIZES)], fars=fars,
        seed=int(cfg.get("seed", 0)), templatelists=cfg.get("templatelists"), set_index=int(cfg.get("set", 1)),
        max_rank=int(cfg.get("max_rank", 10)), chunk=cfg.get("chunk"), dtype=str(cfg.get("dtype", "float16")),
        features=features_folder(str(cfg.features)) if cfg.get("features") else None,
        algo=str(cfg.get("algo", "elasticface")), devkit_out=cfg.get("devkit_out"),
        image_size=image_size, **kw)
    seconds = round(time.perf_counter() - start, 2)
    for line in result["problems"]:
        log.warning("megaface: %s", line)
    print(table(result, fars))
    for view in VIEWS:
        v = result[view]
        at = str(v.get("verification_distractors") or max(int(c) for c in v["rank1"]))
        rows.append({"benchmark": NAMES[view], "pairs": result["summary"]["mate_pairs"], "distractors": int(at),
                     "rank1": v["rank1"][at], **{far_key(f): v[far_key(f)] for f in fars if far_key(f) in v},
                     "seconds": seconds})
    if plots:
        _plot(result, output_dir)
    if cfg.get("devkit_out"):
        print(f"devkit feature files: {os.path.join(str(cfg.devkit_out), RAW_FOLDER)} (raw), "
              f"{os.path.join(str(cfg.devkit_out), CLEAN_FOLDER)} (MegaFace (R)); megaface.features="
              f"{cfg.devkit_out} scores them again without a model")
    block = {view: {k: v for k, v in result[view].items() if k != "roc"} for view in VIEWS}
    return {**block, "summary": result["summary"], "problems": result["problems"], "seconds": seconds}


def _plot(result: dict[str, Any], output_dir: str) -> None:
    import matplotlib.pyplot as plt

    from elasticface.eval.plots import identification_figure

    views = {}
    for view in VIEWS:
        v = result[view]
        at = str(v.get("verification_distractors") or max(int(c) for c in v["rank1"]))
        views[NAMES[view]] = {"rank1": v["rank1"], "cmc": v["cmc"].get(at), "roc": v.get("roc"),
                              "impostors": v.get("impostor_pairs")}
    fig = identification_figure(views, title="MegaFace")
    fig.savefig(os.path.join(output_dir, FIGURE))
    plt.close(fig)
