"""Long passes before the first step say what they do, how far they are and how long they took: one line when
quick, a line per tenth and at least every 30 s when not (a timer speaks when a batch takes longer than that)."""

from __future__ import annotations

import time

import pytest

from elasticface.utils.progress import QUIET_SECONDS, Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def passed(what: str, batches: int, images: int, seconds: float, result: str = "") -> list[str]:
    """The lines of a pass over `batches` batches of `images`, each taking `seconds` (on a clock of the test's)."""
    lines: list[str] = []
    clock = Clock()
    with Progress(what, batches * images, say=lines.append, clock=clock) as progress:
        for _ in range(batches):
            clock.now += seconds
            progress.advance(images)
        progress.done(result)
    return lines


def test_a_quick_pass_is_one_line():
    lines = passed("baseline pixel: raw pixels on lfw", 10, 100, 0.3, "accuracy 60.00%")
    assert lines == ["baseline pixel: raw pixels on lfw: accuracy 60.00%, 1,000 images in 3.0 s"]


def test_a_long_pass_says_each_tenth_then_how_long_it_took():
    lines = passed("imprinting", 20, 50, 1.0)
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


def test_a_long_validation_says_how_far_it_is(monkeypatch, caplog):
    """Embedding a benchmark's pairs takes minutes on a CPU: the log lines say how far it is, apart from the
    validation's own result line."""
    from types import SimpleNamespace

    import elasticface.utils.progress as progress
    from elasticface.callbacks.progress import LogProgress

    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)  # a validation of any length speaks
    trainer = SimpleNamespace(is_global_zero=True, sanity_checking=False, global_step=216, num_val_batches=[6, 4],
                              callback_metrics={})
    bar = LogProgress()
    with caplog.at_level("INFO"):
        bar.on_validation_start(trainer, None)
        for _ in range(10):
            bar.on_validation_batch_end(trainer, None, None, None, 0)
        bar.on_validation_end(trainer, None)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "verifying at step 216: 10%, 1 of 10 batches, 0 s" and len(lines) == 11
    assert lines[-1].startswith("validation at step 216")


@pytest.mark.parametrize("epochs,max_steps_total,batches,every,said", [
    (5, 465, 93, 10, "5 epochs = 465 steps"),
    (4, 5, 93, 10, "5 steps (0.054 of an epoch of 93 steps; trainer.max_steps ends it before 4 epochs); fewer than "
                   "trainer.log_every_n_steps=10: no training metrics logged (trainer.log_every_n_steps=1 logs every "
                   "step)"),
    (4, 5, 93, 1, "5 steps (0.054 of an epoch of 93 steps; trainer.max_steps ends it before 4 epochs)"),
    (2, 3, 3, 1, "3 steps (1 epoch of 3 steps; trainer.max_steps ends it before 2 epochs)"),
    (8, 150, 60, 10, "150 steps (2.5 epochs of 60 steps; trainer.max_steps ends it before 8 epochs)"),
    (-1, 200, 60, 10, "200 steps"),
])
def test_the_runs_length_says_steps_and_epochs_so_they_agree(epochs, max_steps_total, batches, every, said):
    """A 5-step fine-tune of a 4-epoch recipe said "4 epochs = 5 steps"; the steps are now said with the share of
    an epoch they are, and a run shorter than the logging interval says it logs no training metrics."""
    from types import SimpleNamespace

    from elasticface.callbacks.run_overview import length_text

    trainer = SimpleNamespace(estimated_stepping_batches=max_steps_total, max_epochs=epochs,
                              num_training_batches=batches, accumulate_grad_batches=1, log_every_n_steps=every)
    assert length_text(trainer) == said


def test_validation_lines_give_accuracies_in_percent_as_the_summary_does():
    import torch
    from types import SimpleNamespace

    from elasticface.callbacks.progress import LogProgress

    trainer = SimpleNamespace(callback_metrics={"val/acc_mean": torch.tensor(0.975), "val/lfw/acc": torch.tensor(0.95),
                                                "val/lfw/threshold": torch.tensor(0.3)})
    assert LogProgress._format(trainer, "val/") == "acc_mean 97.50%  lfw/acc 95.00%"
    trainer.callback_metrics = {"train/loss": torch.tensor(3.51234), "train/margin_mean": torch.tensor(0.5)}
    assert LogProgress._format(trainer, "train/") == "loss 3.512  margin_mean 0.5"


def test_the_bar_gives_accuracies_in_percent(monkeypatch):
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import TQDMProgressBar

    from elasticface.callbacks.progress import LoggingStepBar

    monkeypatch.setattr(TQDMProgressBar, "get_metrics", lambda *a: {"v_num": 0, "val/acc_mean": 0.9512})
    trainer = SimpleNamespace(training=False, callback_metrics={})
    assert LoggingStepBar().get_metrics(trainer, None) == {"v_num": 0, "val/acc_mean": "95.12%"}
