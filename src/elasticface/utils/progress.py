"""Progress lines for the long passes before the first step (the baselines, imprinting): never a silent minute.

A pass that ends within QUIET_SECONDS says so in one line; a longer one also says how far it is at every tenth
of its work or every LINE_SECONDS, whichever comes first, then how long it took.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

QUIET_SECONDS = 5.0
LINE_SECONDS = 30.0

log = logging.getLogger(__name__)


class Progress:
    """`Progress("eigenfaces on lfw", total=6000, unit="images")`: call `advance(n)` as work is done and
    `done()` at the end (it returns the seconds taken)."""

    def __init__(self, what: str, total: int, unit: str = "images", say: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.what, self.total, self.unit = what, max(0, int(total)), unit
        self.say = say or log.info
        self.clock = clock
        self.started = self.last_line = clock()
        self.count = 0
        self.tenths = 0

    def advance(self, n: int = 1) -> None:
        self.count += n
        now = self.clock()
        if now - self.started < QUIET_SECONDS:
            return
        tenths = 10 * self.count // self.total if self.total else 0
        if tenths > self.tenths or now - self.last_line >= LINE_SECONDS:
            self.tenths = max(self.tenths, tenths)
            share = f"{100 * self.count / self.total:.0f}%, " if self.total else ""
            self.say(f"{self.what}: {share}{self.count:,} of {self.total:,} {self.unit}, {now - self.started:.0f} s")
            self.last_line = now

    def done(self, result: str = "") -> float:
        seconds = self.clock() - self.started
        self.say(f"{self.what}: {result + ', ' if result else ''}{self.count:,} {self.unit} in {seconds:.1f} s")
        return seconds
