"""The training faces' domain, measured before step 1 and said in one line when it is one whose measured best keys
differ from the recipe's.

One domain is measured so far beside the recipe's own (CFP's profiles): low resolution, faces that went through 16-32
pixels and back (`elasticface-convert lowres`, docs/finetune.md), where `trainer.max_epochs=8 finetune.wise_alpha=0.95`
did better than the recipe's 4 epochs. A face's detail is cheap to estimate: the smallest size it can be shrunk to and
blown back from (bicubic, as the conversion does) that reproduces it within a grey level on average. On the
training people of the LFW TinyFace stand-in (docs/evaluation.md), 64 faces drawn by each of three seeds: the aligned
photos measure a median of 96 px of detail in 112 (10th to 90th percentile 80-112), the same faces through 16-32 px
48 (32-56). A median at or under LOW_RESOLUTION of the input is said; the keys are not set for the user: on a second
low-resolution domain (LFW's people at 16-32 px, docs/finetune.md "The default across three domains") they were
level with the recipe, so the measurements do not support setting them. A key the user typed is left out of the line.
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
#: the keys measured best at low resolution (docs/finetune.md, "A second domain: low-resolution faces"), and why
LOW_RESOLUTION_KEYS = {"trainer.max_epochs": 8, "finetune.wise_alpha": 0.95}
EVIDENCE = ("on CFP's people at 16-32 px they gave 90.78 +- 0.19 (mean of CFP-FF and CFP-FP, 5 seeds, with the sharp "
            "photos listed beside) where the recipe's 4 epochs gave 89.74 (seed 1), from 77.58 zero-shot; on LFW's "
            "people at 16-32 px they were level with the recipe (+3.94 against +3.90 points over 90.37); "
            "docs/finetune.md")


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


def domain_advice(train_set: Any, typed: set[str]) -> str | None:
    """The line to say when the training faces look low-resolution and the user typed not every key measured best
    there; else None."""
    measured = median_detail(train_set)
    if measured is None or measured[0] > LOW_RESOLUTION * measured[1]:
        return None
    left = {k: v for k, v in LOW_RESOLUTION_KEYS.items() if k not in typed}
    if not left:
        return None
    detail, width = measured
    return (f"the training faces look low-resolution: about {detail} px of detail in {width} (the median of a sample; "
            f"sharp aligned photos measure about 96): the keys measured best there are "
            f"{' '.join(f'{k}={v}' for k, v in left.items())}, not set for you; {EVIDENCE}")
