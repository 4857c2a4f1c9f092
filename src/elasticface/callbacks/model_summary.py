"""The model's parts and their parameters at the start of training, without a FLOPs figure that was never counted.

Lightning's own summary has a FLOPs column and a `Total FLOPs` line, counted only by running the module's
`example_input_array`, which this module does not set: they read 0. This prints the same table without them (with
them when they were counted), through the log, so train.log keeps it.
"""

from __future__ import annotations

import logging
from typing import Any

from pytorch_lightning.callbacks import ModelSummary
from pytorch_lightning.utilities.model_summary import get_formatted_model_size, get_human_readable_count

log = logging.getLogger(__name__)

FLOPS = "FLOPs"


def _count(n: int) -> str:
    """`3.5 M`, `512`: Lightning's human-readable count without its padding."""
    return get_human_readable_count(n).strip()


def summary_table(columns: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int) -> str:
    """Lightning's columns (name, values) as a text table, the FLOPs column only when something was counted, and
    the totals in one line."""
    columns = [(name, values) for name, values in columns if name != FLOPS or total_flops]
    widths = [max([len(name), *(len(str(v)) for v in values)]) for name, values in columns]
    rows = [[name for name, _ in columns], *zip(*(values for _, values in columns))]
    lines = [" | ".join(f"{str(cell):<{w}}" for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    frozen = total_parameters - trainable_parameters
    flops = f"; {_count(total_flops)} FLOPs" if total_flops else ""
    lines.append(f"{_count(total_parameters)} parameters ({_count(frozen)} not trained), "
                 f"{get_formatted_model_size(model_size)} MB; modules in train mode {total_training_modes['train']}, "
                 f"in eval mode {total_training_modes['eval']}{flops}")
    return "\n".join(lines)


class ParameterSummary(ModelSummary):
    """Lightning's ModelSummary printed by `summary_table`."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        log.info("model:\n" + summary_table(summary_data, total_parameters, trainable_parameters, model_size,
                                            total_training_modes, total_flops))
