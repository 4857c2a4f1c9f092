"""Log a sweep's report (a list of rows) as a W&B table in the sweep's own group.

The report runs after the sweep, in its own process: it opens a short W&B run of job type "report" in
the group the sweep's jobs logged to (:func:`~elasticface.loggers.run_names.sweep_group` of the same
directory), so the table sits next to the runs it ranks. Offline unless logged in, like every run here.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elasticface.loggers.run_names import sweep_group
from elasticface.utils.wandb_mode import wandb_mode
from elasticface.utils.errors import BadValue, MissingPath


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of every row, in the order first seen."""
    return list(dict.fromkeys(key for row in rows for key in row))


def log_report_table(rows: Sequence[Mapping[str, Any]], sweep_dir: str | Path, key: str = "sweep_report",
                     project: str = "elasticface", entity: str | None = None,
                     columns: Sequence[str] | None = None) -> Path | None:
    """Log `rows` (one mapping per table row; a missing key is an empty cell) as the W&B table `key`.

    The run is written under `sweep_dir/wandb` and named `report`. Returns the run's local directory,
    or None when W&B is disabled (WANDB_MODE=disabled: nothing is written).
    """
    import wandb

    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise MissingPath(f"{sweep_dir}: no such sweep directory")
    columns = list(columns) if columns is not None else table_columns(rows)
    if not columns:
        raise BadValue("log_report_table: no columns (rows is empty and no columns were given)")
    unknown = sorted({k for row in rows for k in row} - set(columns))
    if unknown:
        raise BadValue(f"log_report_table: row keys {unknown} are not among the columns {columns}")
    data = [[_cell(row.get(column)) for column in columns] for row in rows]
    mode = wandb_mode()
    run = wandb.init(project=project, entity=entity, dir=str(sweep_dir), mode=mode, group=sweep_group(sweep_dir),
                     job_type="report", name="report", reinit="create_new")
    try:
        run.log({key: wandb.Table(columns=columns, data=data)})
    finally:
        run.finish()
    return None if mode == "disabled" else Path(run.dir).parent


def _cell(value: Any) -> Any:
    """W&B tables take numbers, strings, bools and None; anything else (paths, lists) as its text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)
