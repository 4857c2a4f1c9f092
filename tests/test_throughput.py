import time
from types import SimpleNamespace

import torch

from elasticface.callbacks.throughput import Throughput


class FakeTrainer:
    world_size = 2
    global_step = 1
    _logger_connector = SimpleNamespace(should_update_logs=False)  # a step the loggers do not write


def test_counts_loading_time_between_batches_and_skips_validation():
    cb, trainer, batch = Throughput(), FakeTrainer(), (torch.zeros(4, 3, 2, 2),)
    cb.on_train_epoch_start(trainer, None)
    cb.on_train_batch_start(trainer, None, batch, 0)
    time.sleep(0.3)  # the process's first step: compilation, autotuning
    cb.on_train_batch_end(trainer, None, None, batch, 0)
    assert cb.first_step_seconds >= 0.3 and cb.images == 0
    for _ in range(3):
        cb.on_train_batch_start(trainer, None, batch, 0)
        time.sleep(0.01)  # the step
        cb.on_train_batch_end(trainer, None, None, batch, 0)
        time.sleep(0.02)  # loading the next batch: part of what a run sustains
    cb.on_validation_end(trainer, None)
    time.sleep(0.2)  # validation and the gap around it are not training time
    cb.on_train_batch_start(trainer, None, batch, 0)
    time.sleep(0.01)
    cb.on_train_batch_end(trainer, None, None, batch, 0)
    assert cb.images == 4 * 8
    # 4 step intervals of 0.01 s plus 2 loading gaps of 0.02 s; neither the first step, the validation pause nor
    # the last gap
    assert 0.08 <= cb.seconds < 0.15, cb.seconds
    assert abs(cb.images_per_second - cb.images / cb.seconds) < 1e-9
    cb.on_train_epoch_end(trainer, None)
    assert cb.per_epoch == [cb.images_per_second]  # one epoch: its figure is the run's
    cb.on_train_epoch_start(trainer, None)
    for pause in (0.01, 0.01):
        cb.on_train_batch_start(trainer, None, batch, 0)
        time.sleep(pause)
        cb.on_train_batch_end(trainer, None, None, batch, 0)
    cb.on_train_epoch_end(trainer, None)
    assert len(cb.per_epoch) == 2 and cb.per_epoch[1] > cb.per_epoch[0]  # no loading gaps in the second
