"""Learning rate and step schedule written for one global batch, run at another: the released ElasticFace rule.

The paper states its recipe at a global batch of 512 (4 GPUs x 128): lr 0.1, decays at 80k/140k/210k/280k of
295k steps. The released train.py scales the lr linearly with the global batch (`lr / 512 * batch * world_size`,
train.py:110) and counts its decays in epochs, so they fall at the same number of images seen on any number of
GPUs. With `batch_scaling.reference_batch` set, a run does the same for the values it was given: at setup the
global batch (trainer.devices x trainer.num_nodes x data.batch_size x trainer.accumulate_grad_batches) scales
`optimizer.lr` by global / reference and moves the step milestones of `scheduler.milestones` (a step-interval
schedule) and `trainer.max_steps` to the same number of images; epoch milestones and fractions of the run need
nothing. `batch_scaling.reference_batch=null` uses the values as written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf, open_dict
from elasticface.utils.errors import BadValue

log = logging.getLogger(__name__)

KEY = "batch_scaling.reference_batch"


@dataclass(frozen=True)
class Scaling:
    """What `apply` did: the global batch, the reference it was compared with, and the lr factor."""

    global_batch: int
    reference_batch: int

    @property
    def factor(self) -> float:
        return self.global_batch / self.reference_batch


def _devices(value: object) -> int:
    """A number of processes per node from `trainer.devices`, or a ValueError naming the key to set."""
    if OmegaConf.is_list(value) or isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, str) and "," in value:
        return len([d for d in value.split(",") if d.strip()])
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadValue(
            f"trainer.devices={value!r}: {KEY} needs the global batch, so trainer.devices must be a number of "
            f"devices per node (or a list of them); set trainer.devices=<N>, or {KEY}=null to use optimizer.lr "
            "and the milestones as written"
        )
    return value


def global_batch(cfg: DictConfig) -> int:
    """trainer.devices x trainer.num_nodes x data.batch_size x trainer.accumulate_grad_batches, from the config."""
    trainer = cfg.trainer
    factors = {"trainer.num_nodes": trainer.get("num_nodes", 1), "data.batch_size": cfg.data.get("batch_size"),
               "trainer.accumulate_grad_batches": trainer.get("accumulate_grad_batches", 1)}
    for key, value in factors.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadValue(f"{key}={value!r}: {KEY} needs the global batch; expected an integer >= 1")
    result = _devices(trainer.get("devices", 1))
    for value in factors.values():
        result *= value
    return result


def _scaled_steps(steps: int, factor: float) -> int:
    return max(1, int(round(steps / factor)))


def apply(cfg: DictConfig) -> Scaling | None:
    """Scale `cfg` in place for its global batch (one log line says what changed); None when scaling is off."""
    reference = OmegaConf.select(cfg, KEY)
    if reference is None:
        return None
    if isinstance(reference, bool) or not isinstance(reference, int) or reference < 1:
        raise BadValue(f"{KEY}={reference!r}: expected the global batch optimizer.lr and the step milestones are "
                         "written for (an integer >= 1), or null to use them as written")
    scaling = Scaling(global_batch(cfg), reference)
    lr = OmegaConf.select(cfg, "optimizer.lr")
    if lr is None:
        raise BadValue(f"{KEY}={reference}: the optimizer has no lr to scale (optimizer.lr)")
    done = [f"optimizer.lr {lr:g} -> {lr * scaling.factor:g}"]
    with open_dict(cfg):
        cfg.optimizer.lr = lr * scaling.factor
        scheduler = cfg.get("scheduler")
        if scheduler and scheduler.get("interval", "step") == "step" and scheduler.get("milestones"):
            moved = [_scaled_steps(int(m), scaling.factor) for m in scheduler.milestones]
            done.append(f"scheduler.milestones {list(scheduler.milestones)} -> {moved}")
            scheduler.milestones = moved
        max_steps = cfg.trainer.get("max_steps", -1)
        if isinstance(max_steps, int) and max_steps > 0:
            cfg.trainer.max_steps = _scaled_steps(max_steps, scaling.factor)
            done.append(f"trainer.max_steps {max_steps} -> {cfg.trainer.max_steps}")
    if scaling.factor == 1.0:
        log.info("batch scaling: global batch %d = %s: optimizer.lr and the step milestones as written",
                 scaling.global_batch, KEY)
    else:
        log.info("batch scaling: global batch %d, %s %d: %s (linear lr, the same images seen at each milestone; "
                 "%s=null keeps the values as written)", scaling.global_batch, KEY, reference, ", ".join(done), KEY)
    return scaling
