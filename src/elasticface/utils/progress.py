"""Progress lines for the long passes before the first step (the baselines, imprinting): never a silent minute.

A pass that ends within QUIET_SECONDS says so in one line; a longer one also says how far it is at every tenth
of its work, and at least every LINE_SECONDS (a timer thread speaks when the work itself is slower than that, a
loaded machine's batch of 200 faces can be), then how long it took.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

QUIET_SECONDS = 5.0
LINE_SECONDS = 30.0

log = logging.getLogger(__name__)


class Progress:
    """`with Progress("eigenfaces on lfw", total=6000, unit="images") as progress:` call `progress.advance(n)` as
    work is done and `progress.done()` at the end (it returns the seconds taken); leaving the block stops the
    timer whether or not the pass finished."""

    def __init__(self, what: str, total: int, unit: str = "images", say: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter, line_seconds: float = LINE_SECONDS) -> None:
        self.what, self.total, self.unit = what, max(0, int(total)), unit
        self.say = say or log.info
        self.clock = clock
        self.line_seconds = line_seconds
        self.started = self.last_line = clock()
        self.count = 0
        self.tenths = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._timer.start()

    def _line(self, now: float) -> None:
        share = f"{100 * self.count / self.total:.0f}%, " if self.total else ""
        self.say(f"{self.what}: {share}{self.count:,} of {self.total:,} {self.unit}, {now - self.started:.0f} s")
        self.last_line = now

    def _tick(self) -> None:
        """Speak when no line came for line_seconds (after the quiet start)."""
        while not self._stop.wait(max(0.01, min(self.line_seconds, QUIET_SECONDS or self.line_seconds))):
            with self._lock:
                now = self.clock()
                if now - self.started >= QUIET_SECONDS and now - self.last_line >= self.line_seconds:
                    self._line(now)

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.count += n
            now = self.clock()
            if now - self.started < QUIET_SECONDS:
                return
            tenths = 10 * self.count // self.total if self.total else 0
            if tenths > self.tenths:
                self.tenths = tenths
                self._line(now)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the timer without a closing line (the caller prints its own)."""
        self._stop.set()

    def done(self, result: str = "") -> float:
        self._stop.set()
        self._timer.join()
        seconds = self.clock() - self.started
        self.say(f"{self.what}: {result + ', ' if result else ''}{self.count:,} {self.unit} in {seconds:.1f} s")
        return seconds
