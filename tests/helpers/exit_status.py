"""A command's exit status as the shell sees it: its `main()`'s return value, or the status it exits with (a
user's mistake ends in SystemExit(2), cli/preflight.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def exit_status(main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    try:
        return main(list(argv))
    except SystemExit as ended:
        return ended.code if isinstance(ended.code, int) else 1
