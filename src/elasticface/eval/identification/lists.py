"""The line readers of the identification lists (the testpack's lists, IJB's meta files): text read as data.

One place decides how a list file is opened (UTF-8, numbered from 1) and what a file that is not text becomes:
`BadFile` naming the file and what was expected, never a decoder's traceback.
"""

from __future__ import annotations

from collections.abc import Iterator

from elasticface.utils.errors import BadFile


def text_lines(path: str, what: str) -> Iterator[tuple[int, str]]:
    """(line number, line as read) of a UTF-8 text file; BadFile naming the file and `what` if it is not text."""
    try:
        with open(path, encoding="utf-8") as f:
            yield from enumerate(f, 1)
    except UnicodeDecodeError as err:
        raise BadFile(f"{path}: not UTF-8 text ({err}); expected {what}") from err


def numbered_lines(path: str) -> list[tuple[int, str]]:
    """(line number, line) of the non-empty lines without `#` comments, stripped; BadFile if not UTF-8 text."""
    lines = ((n, line.strip()) for n, line in text_lines(path, "one entry per line"))
    return [(n, s) for n, s in lines if s and not s.startswith("#")]


def read_lines(path: str) -> list[str]:
    """Non-empty lines without `#` comments, stripped."""
    return [s for _, s in numbered_lines(path)]
