"""The training faces' domain, measured before step 1 of a recipe run and said in one line when it is one measured
apart from the others: low resolution, faces that went through 16-32 pixels and back (`elasticface-convert lowres`,
docs/finetune.md).

There the keys measured best, `trainer.max_epochs=8 finetune.wise_alpha=0.95`, are the recipe's own since the rule of
docs/finetune.md ("The default across three domains") chose them over three domains, so the line says the domain and
whether this run keeps those keys; it never sets one (a typed key always wins). A face's detail is cheap to estimate:
the smallest size it can be shrunk to and blown back from (bicubic, as the conversion does) that reproduces it within a
grey level on average. On the training people of the LFW TinyFace stand-in (docs/evaluation.md), 64 faces drawn by
each of three seeds: the aligned photos measure a median of 96 px of detail in 112 (10th to 90th percentile 80-112),
the same faces through 16-32 px 48 (32-56). A median at or under LOW_RESOLUTION of the input is said.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from PIL import Image

from elasticface.data.faults import DroppedRecord

#: sizes (of 112) a face is tried at, smallest first
LADDER = (8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96)
#: the mean absolute difference, in grey levels, within which a size reproduces a face
TOLERANCE = 1.0
#: at or under this share of the input (64 of 112 px) the faces are low-resolution
LOW_RESOLUTION = 64 / 112
#: the keys measured best at low resolution (docs/finetune.md, "The default across three domains"), and the evidence
LOW_RESOLUTION_KEYS = {"trainer.max_epochs": 8, "finetune.wise_alpha": 0.95}
EVIDENCE = ("+3.94 +- 0.32 points on LFW's people at 16-32 px from 90.37 zero-shot, against +3.90 +- 0.12 for 4 "
            "epochs unmixed (3 seeds); 90.78 +- 0.19 on CFP's at 16-32 px, the sharp photos listed beside, from 77.58 "
            "(5 seeds); docs/finetune.md")


def detail_size(face: np.ndarray) -> int:
    """The smallest size (of LADDER, scaled to the face) that reproduces an HWC uint8 face within TOLERANCE, else its
    own width."""
    height, width = face.shape[:2]
    image = Image.fromarray(face)
    original = face.astype(np.float32)
    for size in sorted({max(4, round(s * width / 112)) for s in LADDER}):
        small = image.resize((size, size), Image.Resampling.BICUBIC, reducing_gap=None)
        back = np.asarray(small.resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
        if np.abs(back - original).mean() <= TOLERANCE:
            return size
    return width


def median_detail(train_set: Any, sample: int = 64, seed: int = 0) -> tuple[int, int] | None:
    """(median detail size, input width) over `sample` faces of the training set drawn by `seed`; None without one."""
    indices = random.Random(seed).sample(range(len(train_set)), min(sample, len(train_set)))
    sizes, width = [], 0
    for i in indices:
        item = train_set[i]
        if isinstance(item, DroppedRecord):
            continue
        face = item[0].permute(1, 2, 0).numpy()
        width = face.shape[1]
        sizes.append(detail_size(face))
    return (int(np.median(sizes)), width) if sizes else None


def domain_advice(train_set: Any, run_values: dict[str, Any]) -> str | None:
    """The line to say when the training faces look low-resolution, with the keys measured best there against this
    run's values of them (`run_values`, key -> value); else None."""
    measured = median_detail(train_set)
    if measured is None or measured[0] > LOW_RESOLUTION * measured[1]:
        return None
    detail, width = measured
    differ = {k: run_values.get(k) for k, v in LOW_RESOLUTION_KEYS.items() if run_values.get(k) != v}
    keys = " ".join(f"{k}={v}" + (f" (this run: {differ[k]})" if k in differ else "")
                    for k, v in LOW_RESOLUTION_KEYS.items())
    return (f"the training faces look low-resolution: about {detail} px of detail in {width} (the median of a sample; "
            f"sharp aligned photos measure about 96): the keys measured best there are {keys}"
            f"{'' if differ else ', as this run has them'}; {EVIDENCE}")
