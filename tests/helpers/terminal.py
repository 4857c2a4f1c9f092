"""Commands on a pseudo-terminal of a given width, as a user's terminal, a CI runner's or `script`'s gives them.

A fresh pseudo-terminal reports 0 columns until someone sets its size: that is what some CI runners and `script`
hand a command.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def open_terminal(columns: int) -> tuple[int, int]:
    """(controller, terminal) file descriptors of a new pseudo-terminal `columns` wide (0: size never set)."""
    controller, terminal = pty.openpty()
    if columns:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return controller, terminal


def run_on_terminal(cmd: Sequence[str], columns: int, cwd: Path, env: Mapping[str, str],
                    timeout: float = 600) -> tuple[int, str]:
    """Run `cmd` with stdout and stderr on a pseudo-terminal `columns` wide; its exit status and everything it wrote
    (line ends as the terminal gives them, `\\r\\n`)."""
    controller, terminal = open_terminal(columns)
    process = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=terminal,
                               stderr=terminal)
    os.close(terminal)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([controller], [], [], 1.0)[0]:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the command closed its side of the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        else:
            process.kill()
        return process.wait(timeout=60), output.decode(errors="replace")
    finally:
        os.close(controller)
