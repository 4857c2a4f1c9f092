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
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from elasticface.eval.identification.devkit_files import CLEAN_FOLDER, RAW_FOLDER
from elasticface.eval.identification.megaface import MegafaceSettings, evaluate_megaface
from elasticface.eval.identification.scoring import NAMES, VIEWS
from elasticface.eval.identification.tables import aligned
from elasticface.metrics.roc import far_key

log = logging.getLogger(__name__)

#: the figure of rank-1 by distractors, the CMC and the ROC of both views, in the output folder
FIGURE = "megaface.png"


def evaluate_megaface_config(model: Any, cfg: DictConfig, image_size: int, kw: dict[str, Any], output_dir: str,
                             rows: list[dict[str, Any]], plots: bool) -> dict[str, Any]:
    """Run the `megaface` node, append its table rows, save `megaface.png`; returns the results.json block."""
    settings = MegafaceSettings.from_config(cfg)
    fars = settings.fars
    start = time.perf_counter()
    result = evaluate_megaface(model, settings, image_size, **kw)
    seconds = round(time.perf_counter() - start, 2)
    for line in result["problems"]:
        log.warning("megaface: %s", line)
    print(megaface_table(result, fars))
    for view in VIEWS:
        v = result[view]
        at = str(v.get("verification_distractors") or max(int(c) for c in v["rank1"]))
        rows.append({"benchmark": NAMES[view], "pairs": result["summary"]["mate_pairs"], "distractors": int(at),
                     "rank1": v["rank1"][at], **{far_key(f): v[far_key(f)] for f in fars if far_key(f) in v},
                     "seconds": seconds})
    if plots:
        _plot(result, output_dir)
    if settings.devkit_out:
        print(f"devkit feature files: {os.path.join(settings.devkit_out, RAW_FOLDER)} (raw), "
              f"{os.path.join(settings.devkit_out, CLEAN_FOLDER)} (MegaFace (R)); megaface.features="
              f"{settings.devkit_out} scores them again without a model")
    block = {view: {k: v for k, v in result[view].items() if k != "roc"} for view in VIEWS}
    return {**block, "summary": result["summary"], "problems": result["problems"], "seconds": seconds}


def megaface_table(result: dict[str, Any], fars: Sequence[float]) -> str:
    """The console's MegaFace table: rank-1 by distractor count, the CMC of the verification set, TAR at FAR."""
    counts = list(result["raw"]["rank1"])
    s = result["summary"]
    lines = [f"MegaFace (devkit protocol): {s['probes']:,} probes of {s['identities']} identities, "
             f"{s['mate_pairs']:,} (probe, mate) pairs, {s['distractors']:,} distractors "
             f"({s['noisy_probes']} probes and {s['noisy_distractors']} distractors on the noise lists)"]
    head = ["rank-1 %", *(f"{int(c):,}" for c in counts)]
    rows = [[NAMES[v], *(f"{100 * result[v]['rank1'][c]:.2f}" for c in counts)] for v in VIEWS]
    lines += aligned([head, *rows])
    verify = result["raw"].get("verification_distractors")
    if verify:
        cmc_row = result["raw"]["cmc"].get(str(verify), [])
        head = [f"CMC at {verify:,} %", *(f"r{k + 1}" for k in range(len(cmc_row)))]
        rows = [[NAMES[v], *(f"{100 * x:.2f}" for x in result[v]["cmc"][str(verify)])] for v in VIEWS]
        lines += aligned([head, *rows])
        impostors = result["raw"].get("impostor_pairs", 0)
        beyond = [f for f in fars if f * impostors < 1]  # fewer impostor pairs than 1/FAR: no such threshold
        head = [f"TAR % at {verify:,}", *(f"FAR {f:.0e}" + ("*" if f in beyond else "") for f in fars)]
        rows = [[NAMES[v], *(f"{100 * result[v][far_key(f)]:.2f}" for f in fars)] for v in VIEWS]
        lines += aligned([head, *rows])
        if beyond:
            lines.append(f"* {impostors:,} impostor pairs, fewer than 1/FAR: the TAR is at a threshold of the highest "
                         "impostor score, not at that FAR")
    return "\n".join(lines)


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
