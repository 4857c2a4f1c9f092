"""What a finished run reports: summary.json (accuracy, baseline, speed, checkpoints) and its console table."""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from elasticface.callbacks.baselines import KINDS as BASELINES, Baselines
from elasticface.callbacks.compiled_steps import CompiledSteps
from elasticface.callbacks.epoch_budget import EpochBudget
from elasticface.callbacks.divergence import nonfinite_weights
from elasticface.callbacks.throughput import Throughput
from elasticface.checkpointing.run_checkpoint import RunCheckpoint
from elasticface.finetune.config import PARTS as FINETUNE_PARTS
from elasticface.loggers.run_names import group_choice
from elasticface.module import FaceRecognitionModule
from elasticface.sweeps.trial_pruning import TrialPruning

log = logging.getLogger(__name__)


def _callback(trainer: pl.Trainer, kind: type) -> Any:
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)


def make_summary(cfg: DictConfig, trainer: pl.Trainer, model: FaceRecognitionModule, train_seconds: float,
                 params: dict[str, Any]) -> dict[str, Any]:
    """What the trainer's callbacks measured (throughput, baselines, compiled steps) beside the accuracies."""
    throughput: Throughput = _callback(trainer, Throughput)
    baselines: dict[str, dict[str, float]] = getattr(_callback(trainer, Baselines), "scores", {})
    counted: CompiledSteps | None = _callback(trainer, CompiledSteps)
    budget: EpochBudget | None = _callback(trainer, EpochBudget)
    pruning: TrialPruning | None = _callback(trainer, TrialPruning)
    pruned = pruning is not None and pruning.why is not None
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    best = float(model.best_acc_mean)
    finite = not nonfinite_weights(model)
    if not finite:  # never an accuracy for NaN weights
        log.error("the final weights are not finite: no accuracy is reported")
        metrics, best = {}, float("nan")
    run_ckpt = next((c for c in trainer.checkpoint_callbacks if isinstance(c, RunCheckpoint)), None)
    best_ckpt = next((c for c in trainer.checkpoint_callbacks
                      if not isinstance(c, RunCheckpoint) and c.monitor == "val/acc_mean"), None)
    best_score = getattr(best_ckpt, "best_model_score", None)
    summary: dict[str, Any] = {
        "val/acc_mean": {"best": best, "final": metrics.get("val/acc_mean")},
        "val/sets": {name: metrics.get(f"val/{name}/acc") for name in model.val_metrics},
        "train_seconds": train_seconds,
        "images_per_second": throughput.images_per_second,  # the first step apart (compilation, autotuning)
        "images_per_second_per_epoch": throughput.per_epoch,
        "first_step_seconds": throughput.first_step_seconds,
        "global_step": trainer.global_step,
        "epochs": trainer.current_epoch,
        # a sweep round's budget (callbacks/epoch_budget.py) or an Optuna pruner (sweeps/trial_pruning.py) ended
        # the fit here, before trainer.max_epochs
        "stopped_at_epoch": trainer.current_epoch if pruned or (budget is not None and budget.stopped_early(trainer))
        else None,
        "pruned": {"why": pruning.why} if pruned else None,
        "m": cfg.get("m"), "s": model.head.s, "sigma": cfg.get("sigma"), "seed": cfg.get("seed"),
        "head": group_choice(cfg, "head"),
        "backbone": group_choice(cfg, "backbone"),
        "data": group_choice(cfg, "data"),
        "compile": OmegaConf.select(cfg, "model.compile", default=False),  # the setting; `compiled`: what ran
        # counted: every training step of this process called the compiled graph (docs/compile.md)
        "compiled": counted is not None and model.compiled_calls is not None and counted.ran_compiled,
        "compiled_steps": {"compiled": getattr(counted, "compiled", 0), "eager": getattr(counted, "eager", 0)},
        "margin_schedule": _schedule_text(OmegaConf.select(cfg, "model.margin_schedule", default=None)),
        "choices": {k[len("choice/"):]: v for k, v in params.items() if k.startswith("choice/")},
        "weights_finite": finite,
        # last_checkpoint holds step `global_step`; best_checkpoint the weights that scored best_checkpoint_acc
        "last_checkpoint": getattr(run_ckpt, "last_model_path", None) or None,
        "best_checkpoint": getattr(best_ckpt, "best_model_path", None) or None,
        "best_checkpoint_acc": float(best_score) if best_score is not None else None,
        "output_dir": str(cfg.paths.output_dir),
    }
    for kind in BASELINES:
        per_set = baselines.get(kind) or {}
        summary[f"baseline/{kind}_acc"] = sum(per_set.values()) / len(per_set) if per_set else None
        summary[f"baseline/{kind}_acc_per_set"] = per_set
    summary["finetune"] = ({key: OmegaConf.select(cfg, f"finetune.{key}") for key in FINETUNE_PARTS}
                           if cfg.get("weights") else None)
    summary["change_from_weights"] = change_from_weights(summary["val/sets"], baselines.get("start") or {})
    return summary


def change_from_weights(end: dict[str, float | None], start: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per set the loaded weights' accuracy before the first step, the final one, and the change (end - start)."""
    return {name: {"start": start[name], "end": value, "change": value - start[name]}
            for name, value in end.items() if value is not None and start.get(name) is not None}


def _schedule_text(schedule: Any) -> str:
    """`none`, or e.g. `warmup(fraction=0.5)`: the margin schedule as the summary names it."""
    if not schedule or schedule.get("kind", "none") == "none":
        return "none"
    length = f"steps={schedule['steps']}" if schedule.get("steps") is not None else f"fraction={schedule['fraction']}"
    start = f", start={schedule['start']}" if schedule.get("start") else ""
    return f"{schedule['kind']}({length}{start})"


def format_summary(summary: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None or x != x else f"{100 * x:.2f}%"

    acc = summary["val/acc_mean"]
    s = f"{summary['s']:.4g}" if isinstance(summary["s"], float) else summary["s"]
    lines = [
        "",
        "=" * 64,
        f" head={summary['head']}  backbone={summary['backbone']}  data={summary['data']}",
        f" m={summary['m']}  s={s}  sigma={summary['sigma']}  seed={summary['seed']}"
        + (f"  margin_schedule={summary['margin_schedule']}" if summary.get("margin_schedule", "none") != "none"
           else ""),
        f" trained {summary['global_step']} steps in {summary['train_seconds']:.1f} s "
        f"({summary['images_per_second']:.1f} images/s)",
        " verification accuracy on identities never seen in training (10-fold, flip fusion):",
    ]
    for name, value in summary["val/sets"].items():
        base = summary["baseline/pixel_acc_per_set"].get(name)
        eigen = summary.get("baseline/eigenface_acc_per_set", {}).get(name)
        start = summary.get("baseline/start_acc_per_set", {}).get(name)
        change = (summary.get("change_from_weights") or {}).get(name)
        lines.append(f"   {name:<16} model {pct(value):>8}   raw-pixel baseline {pct(base):>8}"
                     + (f"   eigenfaces {pct(eigen):>8}" if eigen is not None else "")
                     + (f"   loaded weights {pct(start):>8}" if start is not None else "")
                     + (f"   change {100 * change['change']:+.2f}" if change is not None else ""))
    lines.append(f"   {'mean':<16} model {pct(acc['final']):>8}   (best {pct(acc['best'])})   "
                 f"baseline {pct(summary['baseline/pixel_acc'])}")
    if acc["final"] is not None and summary["baseline/pixel_acc"] is not None:
        lines.append(f"   gain over raw pixels: {100 * (acc['final'] - summary['baseline/pixel_acc']):+.2f} points")
    if acc["final"] is not None and summary.get("baseline/start_acc") is not None:
        lines.append(f"   change from the loaded weights: {100 * (acc['final'] - summary['baseline/start_acc']):+.2f} "
                     f"points (best {100 * (acc['best'] - summary['baseline/start_acc']):+.2f})")
    if summary.get("pruned"):
        lines.append(f" {summary['pruned']['why']}: the search goes on with other trials")
    elif summary.get("stopped_at_epoch") is not None:
        lines.append(f" stopped after epoch {summary['stopped_at_epoch']} for a round of successive halving: the sweep "
                     "continues it from its checkpoint if it ranks among the best")
    debug = (summary.get("choices") or {}).get("debug")
    if debug:  # a debug=tiny run's 6 steps check that everything runs; its accuracy says nothing about the method
        lines.append(f" a smoke run (debug={debug}, {summary['global_step']} steps): it checks that training runs; "
                     "accuracy after a few steps is not a result")
    lines += [f" outputs: {summary['output_dir']}  (summary.json, checkpoints/)", "=" * 64]
    return "\n".join(lines)
