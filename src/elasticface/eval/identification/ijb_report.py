"""`python eval.py ijb.root=...`: the `ijb` config node run and put into the table and results.json, beside MegaFace's
(`megaface_report`).

IJB-B/C 1:1 (TAR at FAR, `eval.ijb`) and 1:N (rank-N and TPIR at FPIR, `ijb_1n`) come from one embedding pass; each
protocol asked for gets one table row, 1:N a results.json block `ijb_1n`, 1:1 its ROC among eval.py's curves.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
from omegaconf import DictConfig

from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)


def evaluate_ijb_config(model: Any, ijb_cfg: DictConfig, image_size: int, kw: dict[str, Any], output_dir: str,
                        rows: list[dict[str, Any]], curves: dict[str, dict[str, np.ndarray]],
                        blocks: dict[str, Any]) -> list[str]:
    """IJB-B/C by ijb.protocol: 1v1 (TAR at FAR), 1n (rank-N and TPIR at FPIR) or both, one table row each.
    Returns the files written (the scores and labels with ijb.save_scores)."""
    from elasticface.eval.ijb import evaluate_ijb

    protocol = str(ijb_cfg.protocol)
    if protocol not in ("1v1", "1n", "both"):
        raise BadValue(f"ijb.protocol={protocol!r}: expected 1v1 (verification), 1n (identification) or both")
    target = str(ijb_cfg.target).upper()
    fars = [float(f) for f in ijb_cfg.fars]
    start = time.perf_counter()
    res = evaluate_ijb(model, str(ijb_cfg.root), target, image_size=image_size,
                       use_detector_score=bool(ijb_cfg.use_detector_score),
                       normalize_images=bool(ijb_cfg.normalize_images), fars=fars,
                       identification=protocol != "1v1", verification=protocol != "1n",
                       fpirs=[float(f) for f in ijb_cfg.fpirs], **kw)
    seconds = round(time.perf_counter() - start, 2)
    written: list[str] = []
    if protocol != "1n":
        rows.append({"benchmark": target, "pairs": res["num_pairs"], **res["tar"], "seconds": seconds})
        fpr, tpr, _ = res["roc"]
        curves[target] = {"fpr": fpr, "tpr": tpr}
        if ijb_cfg.save_scores:
            written = [os.path.join(output_dir, f"{ijb_cfg.target}_{part}.npy") for part in ("scores", "labels")]
            np.save(written[0], res["scores"])
            np.save(written[1], res["labels"])
    if protocol != "1v1":
        one_n = res["identification"]
        rows.append({"benchmark": f"{target} 1:N", "pairs": one_n["probes"],
                     **{k: v for k, v in one_n.items() if k.startswith(("rank", "tpir"))}, "seconds": seconds})
        blocks["ijb_1n"] = {"target": target, **one_n}
        for line in one_n.get("problems", []):
            log.warning("%s 1:N: %s", target, line)
    return written
