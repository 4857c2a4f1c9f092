"""A command's exit status as the shell sees it: its `main()`'s return value, or the status it exits with (a
user's mistake ends in SystemExit(2), cli/preflight.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def exit_status(main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    try:
        return main(list(argv))
    except SystemExit as ended:
        return ended.code if isinstance(ended.code, int) else 1


def refused_line(main: Callable[[Sequence[str]], int], argv: Sequence[str], capsys) -> str:
    """The one line a command says when it refuses a user's mistake (exit status 2, one line on stderr)."""
    capsys.readouterr()
    code = exit_status(main, argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, lines)
    return lines[0]
