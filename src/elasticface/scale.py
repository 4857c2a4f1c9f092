"""The margin heads' scale s: AdaCos's fixed scale from the training set's class count, s = √2·ln(C - 1)
(`scale: class_count`, the template's default), or the head's own (`scale: head`: 64 for ArcFace, CosFace and
ElasticFace, the paper's and the released recipes).

At s = 64 on a small set (LFW fold 10: 3,830 identities, 1,256 steps) margin heads verify worse than plain softmax
and swing from seed to seed; at the scale AdaCos derives for C classes (11.67 there) they pass it
(docs/margin_schedule.md). The head option writes `s: class_count` into the config (so `s=32` typed, or a head
preset's own s, still wins); C is known once the data is read, so the number is set when the module is built.
"""

from __future__ import annotations

import logging

from omegaconf import DictConfig
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)

CLASS_COUNT = "class_count"
RULES = (CLASS_COUNT, "head")


def check_rule(rule: object) -> None:
    if rule not in RULES:
        raise BadValue(f"scale={rule!r}: expected one of {list(RULES)} (sqrt(2)·ln(C - 1) from the classes, or "
                         "the head's own s)")


def head_scale(paper_s: float, rule: str) -> float | str:
    """The head option's s under `scale: <rule>`: the rule's name for class_count, else the head's own."""
    check_rule(rule)
    return CLASS_COUNT if rule == CLASS_COUNT else paper_s


def check_scale(cfg: DictConfig) -> None:
    """`scale` is a rule and s a number > 0, `class_count` or null (a head without one); else one line, before
    any data is read."""
    check_rule(cfg.get("scale", "head"))  # a config of the user's own without the key: the heads' own s
    s = cfg.get("s")
    if s is None or s == CLASS_COUNT:
        return
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        raise BadValue(f"s={s!r}: expected a number > 0 or {CLASS_COUNT} (sqrt(2)·ln(C - 1) from the classes)")
    if not s > 0:
        raise BadValue(f"s={s}: the scale must be > 0, or {CLASS_COUNT} (sqrt(2)·ln(C - 1) from the classes)")


def class_count_scale(num_classes: int) -> float:
    """AdaCos's fixed scale for `num_classes` training classes (Zhang et al. 2019), for `s: class_count`."""
    if num_classes < 3:
        raise BadValue(f"s={CLASS_COUNT}: sqrt(2)·ln(C - 1) needs at least 3 classes, the data has {num_classes}; "
                         "give s=<number> or scale=head")
    from elasticface.heads.adacos import fixed_scale  # here: the config resolver above must not import torch

    s = fixed_scale(num_classes)
    log.info("s = sqrt(2)·ln(C - 1) = %.4f for C = %d classes (scale=class_count; scale=head keeps the head's own)",
             s, num_classes)
    return s
