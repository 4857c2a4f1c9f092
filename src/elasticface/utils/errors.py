"""The line between a user's mistake and a defect of the project's, which every command draws the same way.

A `UserError` is raised on purpose, where the project recognises a mistake: a path that does not exist, a file that
is not what its key needs, a value out of its range, a key that does not exist, a layout that does not match. Its
message names the file, key or value, says what was found and what was expected, and what to do. Every command
prints it as ONE line on stderr and exits with status 2 (cli/preflight.py); any other exception is a defect of the
project's and keeps its traceback (exit status 1). `ELASTICFACE_TRACEBACK=1` shows the traceback of a user's
mistake too.

The subclasses also derive from the built-in exception a caller would expect (ValueError, FileNotFoundError), so
`except ValueError` around a reader keeps working.
"""

from __future__ import annotations

import os

#: the documented switch that shows a user's mistake with its traceback
TRACEBACK_SWITCH = "ELASTICFACE_TRACEBACK"


class UserError(Exception):
    """A mistake of the user's, recognised by the project: one line on stderr, exit status 2."""


class BadValue(UserError, ValueError):
    """A config value or argument out of its range, of the wrong kind, or naming an option that does not exist."""


class BadFile(UserError, ValueError):
    """A file that is not what its key needs: another format, truncated, corrupt, or a layout that does not match.
    The message starts with the file's path."""


class MissingPath(UserError, FileNotFoundError):
    """A path the user named (or a file a layout needs) that does not exist."""


class OutputExists(UserError, FileExistsError):
    """An output folder that already holds files, where the command was not told to overwrite them."""


def user_error_in(err: BaseException) -> UserError | None:
    """The user's mistake behind `err`: itself, or the one a wrapper raised it from (Hydra's instantiate raises
    InstantiationException from the error of the class it built); None for a defect."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, UserError):
            return err
        seen.add(id(err))
        err = err.__cause__
    return None


def one_line(err: BaseException) -> str:
    """The error's message as one line: its lines joined, never empty."""
    text = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
    return text or type(err).__name__


def traceback_wanted() -> bool:
    """Whether the user asked to see a user's mistake with its traceback (`ELASTICFACE_TRACEBACK=1`)."""
    return os.environ.get(TRACEBACK_SWITCH, "").strip().lower() not in ("", "0", "false", "no")
