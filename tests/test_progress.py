"""Long passes before the first step say what they do, how far they are and how long they took: one line when
quick, a line per tenth and at least every 30 s when not (a timer speaks when a batch takes longer than that)."""

from __future__ import annotations

import time

from elasticface.utils.progress import QUIET_SECONDS, Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_quick_pass_is_one_line():
    lines: list[str] = []
    clock = Clock()
    with Progress("baseline pixel: raw pixels on lfw", 1000, say=lines.append, clock=clock) as progress:
        for _ in range(10):
            clock.now += 0.3
            progress.advance(100)
        progress.done("accuracy 60.00%")
    assert lines == ["baseline pixel: raw pixels on lfw: accuracy 60.00%, 1,000 images in 3.0 s"]


def test_a_long_pass_says_each_tenth_then_how_long_it_took():
    lines: list[str] = []
    clock = Clock()
    with Progress("imprinting", 1000, say=lines.append, clock=clock) as progress:
        for _ in range(20):
            clock.now += 1.0
            progress.advance(50)
        progress.done()
    tenths = [line for line in lines if "%" in line]
    assert [line.split(": ")[1].split("%")[0] for line in tenths] == ["25", "30", "40", "50", "60", "70", "80", "90",
                                                                      "100"]
    assert tenths[0] == "imprinting: 25%, 250 of 1,000 images, 5 s", "quiet for the first 5 s"
    assert lines[-1] == "imprinting: 1,000 images in 20.0 s"


def test_a_batch_slower_than_the_line_interval_is_not_silence():
    """One batch of 200 faces on a loaded machine can take a minute: the timer says where the pass stands."""
    lines: list[str] = []
    clock = Clock()
    with Progress("baseline start: the loaded weights on cfp_ff", 1000, say=lines.append, clock=clock,
                  line_seconds=0.05) as progress:
        clock.now = QUIET_SECONDS + 1.0  # no batch finished yet, past the quiet start
        deadline = time.monotonic() + 5
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines and lines[0].startswith("baseline start: the loaded weights on cfp_ff: 0%, 0 of 1,000 images")
        progress.advance(1000)
        progress.done()
    assert lines[-1].endswith("1,000 images in 6.0 s")
    said = len(lines)
    time.sleep(0.2)
    assert len(lines) == said, "the timer stops with the pass"
