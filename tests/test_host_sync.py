"""No host synchronisation in a training step: steps that do not log never read a value back from the device.

A GPU runs ahead of Python; each read (`item()`, `bool(t)`, a boolean mask, `.cpu()`, ...) makes the host
wait for every queued kernel, and a few per step cost a large part of a fast GPU's throughput. The whole
step runs through the Trainer (data transfer, module, class layer, head, loss, backward, callbacks,
optimizer, Lightning's own logging) with every reading entry point of torch counted
(tests/helpers/host_reads.py); on a logging step (`trainer.log_every_n_steps`) the logged values may be read.
"""

from __future__ import annotations

import pytest
import torch

import elasticface.training as training
from elasticface.utils.speed import cpu_has_bf16
from helpers.host_reads import StepReads, count_host_reads
from helpers.nonfinite import nan_loss_at_step

# 3 batches per epoch x 2 epochs at debug=tiny: steps 0..5, of which step 3 logs (log_every_n_steps=4);
# a data worker process keeps the dataset's own host work out of the count
OVERRIDES = ["trainer.log_every_n_steps=4", "data.num_workers=1", "checkpoint.every_n_steps=1000"]


def reads_per_step(cfg, monkeypatch) -> list[tuple[int, bool, list[tuple[str, str]]]]:
    with count_host_reads() as counter:
        counter.frames = 4
        steps = StepReads(counter)
        build = training.required_callbacks
        monkeypatch.setattr(training, "required_callbacks", lambda *a, **k: build(*a, **k) + [steps])
        training.run(cfg)
    return steps.steps


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        pytest.param(["head=elastic_arc_plus"], marks=pytest.mark.slow),
        pytest.param(["head=curricularface", "trainer.precision=bf16-mixed"], marks=[
            pytest.mark.slow,
            # refused without bf16 instructions (tests/test_speed_settings.py checks the refusal)
            pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU's kernels have no bf16: bf16-mixed is refused")]),
        pytest.param(
            [
                "head=magface",
                "callbacks.progress_bar._target_=elasticface.callbacks.progress.LoggingStepBar",
                "~callbacks.progress_bar.log_every_n_steps",
            ],
            marks=pytest.mark.slow,
        ),
        pytest.param(["model=partial_fc"], marks=pytest.mark.slow),
    ],
    ids=["default", "elastic_arc_plus", "curricularface-bf16", "magface-tqdm", "partial_fc"],
)
def test_steps_that_do_not_log_read_nothing_from_the_device(tiny_cfg, monkeypatch, overrides):
    steps = reads_per_step(tiny_cfg(*OVERRIDES, *overrides), monkeypatch)
    assert len(steps) == 6 and [logged for _, logged, _ in steps].count(True) == 1, steps
    silent = [(step, reads) for step, logged, reads in steps if not logged and reads]
    assert not silent, "host reads on steps that do not log:\n" + "\n".join(
        f"step {step}: {what} at {where}" for step, reads in silent for what, where in reads
    )
    logged = [reads for _, logged, reads in steps if logged][0]
    assert logged, "the logging step reads what it logs: the counter sees reads"


def test_the_counter_sees_each_kind_of_read():
    """The oracle of the test above: each reading entry point is counted, device-side work is not."""
    x = torch.arange(6.0)
    with count_host_reads() as counter:
        counter.active = True
        x.sum().item()
        x.tolist()
        bool(x[0])
        float(x[1])
        int(x[2])
        x.nonzero()
        x.cpu()
        x.numpy()
        x[x > 2]
        torch.unique(x)
        torch.where(x > 1)
        x.to("cpu")
        n_reads = len(counter.take())
        y = x * 2 + 1
        torch.where(x > 1, x, y)
        x[torch.tensor([0, 2])]
        x.to(x.device, non_blocking=True)
        x.masked_fill(x > 2, 0.0)
        torch._foreach_norm([x, y])
        assert counter.take() == []
    assert n_reads == 12


def test_a_nonfinite_step_between_logging_steps_is_skipped_on_the_device_and_reported(tiny_cfg, tmp_path, monkeypatch):
    """The divergence guard reads its flag only on logging steps: the bad step moved nothing, the report names it,
    and no checkpoint was written after it."""
    from elasticface.callbacks.divergence import TrainingDiverged

    nan_loss_at_step(monkeypatch, 4)
    # steps 0..5 over 2 epochs; logging steps are 2 and 5 (log_every_n_steps=3); a checkpoint at steps 2 and 4
    with pytest.raises(TrainingDiverged, match=r"diverged at step 4 .*loss = nan"):
        training.run(tiny_cfg("trainer.log_every_n_steps=3", "checkpoint.every_n_steps=2"))
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4, "the checkpoint after the bad step was refused"
    assert all(
        torch.isfinite(v).all() for v in last["state_dict"].values() if torch.is_tensor(v) and v.is_floating_point()
    )
