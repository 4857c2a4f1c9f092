"""`python eval.py tinyface.root=...`: the `tinyface` config node run, printed, plotted and put into results.json.

results.json gets a `tinyface` block: `rank1`, `rank5`, `rank20` (percent, as AdaFace and CVLface print them), `cmc`
(percent at rank 1 ... the largest of `tinyface.ranks`), the counts and `problems`; the results table one row.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from omegaconf import DictConfig

from elasticface.eval.identification.tinyface import evaluate_tinyface

log = logging.getLogger(__name__)

#: the CMC, in the output folder
FIGURE = "tinyface.png"


def evaluate_tinyface_config(model: Any, cfg: DictConfig, image_size: int, kw: dict[str, Any], output_dir: str,
                             rows: list[dict[str, Any]], plots: bool) -> tuple[dict[str, Any], list[str]]:
    """Run the `tinyface` node, append its table row, save `tinyface.png`; returns (the results.json block, the files
    written)."""
    ranks = [int(r) for r in cfg.ranks]
    start = time.perf_counter()
    result = evaluate_tinyface(model, str(cfg.root), ranks, image_size, **kw)
    seconds = round(time.perf_counter() - start, 2)
    for line in result["problems"]:
        log.warning("tinyface: %s", line)
    print(f"TinyFace (closed set): {result['probes']:,} probes of {result['identities']:,} identities against "
          f"{result['gallery_matches']:,} matches and {result['distractors']:,} distractors; "
          + ", ".join(f"rank-{k} {result[f'rank{k}']:.2f}%" for k in ranks))
    rows.append({"benchmark": "TinyFace", "pairs": result["probes"], "distractors": result["distractors"],
                 **{f"rank{k}": result[f"rank{k}"] / 100 for k in ranks}, "seconds": seconds})
    written = []
    if plots:
        import matplotlib.pyplot as plt

        from elasticface.eval.plots import cmc_figure

        written.append(os.path.join(output_dir, FIGURE))
        fig = cmc_figure({"TinyFace": result["cmc"]}, title=f"TinyFace: {result['distractors']:,} distractors")
        fig.savefig(written[0])
        plt.close(fig)
    return {**result, "seconds": seconds}, written
