"""The console's table layout, one for eval.py's results table and MegaFace's own tables: the first column left,
the others right, two spaces between."""

from __future__ import annotations


def aligned(cells: list[list[str]], rule: bool = False) -> list[str]:
    """The rows of cells as the lines of a table, each column as wide as its widest cell; with `rule` a line of
    dashes under the first row (the header)."""
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    if rule:
        cells = [cells[0], ["-" * w for w in widths], *cells[1:]]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in cells]
