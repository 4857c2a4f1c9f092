"""The training job behind `python train.py`: build everything from the config, fit, write summary.json."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.accelerators import CPUAccelerator
from pytorch_lightning.callbacks import LearningRateMonitor, ProgressBar
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from elasticface.callbacks.progress import progress_bar
from elasticface.callbacks.divergence import DivergenceGuard, nonfinite_weights
from elasticface.callbacks.loader_resume import ResumeLoaderState
from elasticface.callbacks.preemption import Preemption
from elasticface.callbacks.run_checkpoint import RunCheckpoint
from elasticface.callbacks.throughput import Throughput
from elasticface.data.datamodule import FaceDataModule
from elasticface.data.pairs import PairSet
from elasticface.data.transforms import normalize
from elasticface.metrics.verification import VerificationAccuracy
from elasticface.module import FaceRecognitionModule
from elasticface.utils.checkpoint_io import AtomicCheckpointIO
from elasticface.utils import resume
from elasticface.utils.config import flatten, group_choices, validate_top_level
from elasticface.utils.console import print_config_tree, quiet_lightning_tips
from elasticface.utils.speed import check_cpu_precision, check_world_size

log = logging.getLogger(__name__)


def pixel_baseline(pairs: PairSet, batch_size: int = 512) -> float:
    """Verification accuracy of raw pixels as embeddings (cosine similarity), same 10-fold protocol."""
    metric = VerificationAccuracy(pairs.issame)
    for start in range(0, len(pairs), batch_size):
        indices = list(range(start, min(start + batch_size, len(pairs))))
        images = torch.stack([pairs[i][0] for i in indices])
        metric.update(normalize(images).flatten(1), torch.tensor(indices))
    return float(metric.compute()["acc"])


def build_module(cfg: DictConfig, num_classes: int) -> FaceRecognitionModule:
    """`model._target_` built from the config as plain containers (they become the checkpoint's hparams)."""
    return instantiate(cfg.model, num_classes=num_classes, _recursive_=False, _convert_="all")


def build_callbacks(cfg: DictConfig, has_logger: bool) -> list[pl.Callback]:
    """The configured callbacks, each node checked, plus what the job itself needs: throughput, the
    divergence guard, the loader's resume state and a progress display."""
    callbacks = []
    for key, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ValueError(f"callbacks.{key}={node!r}: expected a config with a _target_ (or null to disable it)")
        callback = instantiate(node)
        if isinstance(callback, LearningRateMonitor) and not has_logger:
            log.info(f"callbacks.{key}: no logger to write learning rates to, left out")
            continue
        callbacks.append(callback)
    if not any(isinstance(c, Throughput) for c in callbacks):
        callbacks.append(Throughput())
    if not any(isinstance(c, DivergenceGuard) for c in callbacks):  # divergence always fails the run
        callbacks.append(DivergenceGuard(int((cfg.get("train") or {}).get("skip_nonfinite_steps", 0))))
    callbacks.append(ResumeLoaderState())  # exact mid-epoch resume is not optional
    if cfg.trainer.get("enable_progress_bar", True) and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(progress_bar(log_every_n_steps=cfg.trainer.get("log_every_n_steps") or 10))
    return callbacks


def build_trainer(cfg: DictConfig) -> tuple[pl.Trainer, Throughput]:
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    callbacks = build_callbacks(cfg, has_logger=bool(loggers) or bool(cfg.trainer.get("fast_dev_run")))
    throughput = next(c for c in callbacks if isinstance(c, Throughput))
    check_world_size(cfg.trainer.get("num_nodes", 1), cfg.trainer.get("devices"))
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=[AtomicCheckpointIO()])
    check_cpu_precision(trainer.precision, isinstance(trainer.accelerator, CPUAccelerator))
    return trainer, throughput


def hyperparameters(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config, flattened, with the sweep axes (m, s, sigma) and the group choices up front."""
    params: dict[str, Any] = {"m": cfg.get("m"), "s": cfg.get("s"), "sigma": cfg.get("sigma"), "seed": cfg.get("seed")}
    params.update({f"choice/{k}": v for k, v in group_choices().items()})
    params.update(flatten(OmegaConf.to_container(cfg, resolve=True)))
    return params


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train one model as the config says and return (and write) its summary."""
    validate_top_level(cfg)
    quiet_lightning_tips()
    if cfg.get("extras", {}).get("print_config"):
        print_config_tree(cfg, group_choices())
    pl.seed_everything(cfg.seed, workers=True)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    checkpoint_dir = Path(OmegaConf.select(cfg, "callbacks.run_checkpoint.dirpath", default=None)
                          or output_dir / "checkpoints")
    ckpt_path, finished = resume.resolve(cfg.get("resume"), cfg.get("ckpt_path"), output_dir, checkpoint_dir)
    if finished is not None:
        log.info(format_summary(finished))
        return finished

    datamodule: FaceDataModule = instantiate(cfg.data)
    datamodule.setup("fit")
    model = build_module(cfg, datamodule.num_classes)
    trainer, throughput = build_trainer(cfg)
    params = hyperparameters(cfg)
    for logger in trainer.loggers:
        logger.log_hyperparams(params)

    baselines = {name: pixel_baseline(pairs) for name, pairs in datamodule.val_sets.items()} if cfg.get("pixel_baseline") else {}

    started = time.perf_counter()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    preemption = next((c for c in trainer.callbacks if isinstance(c, Preemption)), None)
    if preemption is not None and preemption.preempted:
        log.warning("preempted at step %d: not finished, no summary.json; start it again with resume=auto "
                    "(or ckpt_path=<last.ckpt>) to continue", trainer.global_step)
        return {"preempted": True, "global_step": trainer.global_step, "val/acc_mean": {"best": None, "final": None}}
    if datamodule.val_sets and model.validated_at_step != trainer.global_step:
        # stopped between validations (max_steps mid-epoch, max_time): score the final weights too
        trainer.validate(model, datamodule=datamodule, verbose=False)
    train_seconds = time.perf_counter() - started

    summary = make_summary(cfg, trainer, model, baselines, train_seconds, throughput, params)
    if trainer.is_global_zero:
        (output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        log.info(format_summary(summary))
    return summary


def make_summary(cfg: DictConfig, trainer: pl.Trainer, model: FaceRecognitionModule, baselines: dict[str, float],
                 train_seconds: float, throughput: Throughput, params: dict[str, Any]) -> dict[str, Any]:
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
        "baseline/pixel_acc": (sum(baselines.values()) / len(baselines)) if baselines else None,
        "baseline/pixel_acc_per_set": baselines,
        "train_seconds": train_seconds,
        "images_per_second": throughput.images_per_second,
        "global_step": trainer.global_step,
        "m": cfg.get("m"), "s": cfg.get("s"), "sigma": cfg.get("sigma"), "seed": cfg.get("seed"),
        "head": params.get("choice/head", cfg.model.head.get("_target_")),
        "backbone": params.get("choice/backbone", cfg.model.backbone.get("name")),
        "data": params.get("choice/data", cfg.data.get("_target_")),
        "choices": {k[len("choice/"):]: v for k, v in params.items() if k.startswith("choice/")},
        "weights_finite": finite,
        # last_checkpoint holds step `global_step`; best_checkpoint the weights that scored best_checkpoint_acc
        "last_checkpoint": getattr(run_ckpt, "last_model_path", None) or None,
        "best_checkpoint": getattr(best_ckpt, "best_model_path", None) or None,
        "best_checkpoint_acc": float(best_score) if best_score is not None else None,
        "output_dir": str(cfg.paths.output_dir),
    }
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None or x != x else f"{100 * x:.2f}%"

    acc = summary["val/acc_mean"]
    lines = [
        "",
        "=" * 64,
        f" head={summary['head']}  backbone={summary['backbone']}  data={summary['data']}",
        f" m={summary['m']}  s={summary['s']}  sigma={summary['sigma']}  seed={summary['seed']}",
        f" trained {summary['global_step']} steps in {summary['train_seconds']:.1f} s "
        f"({summary['images_per_second']:.1f} images/s)",
        " verification accuracy on identities never seen in training (10-fold, flip fusion):",
    ]
    for name, value in summary["val/sets"].items():
        base = summary["baseline/pixel_acc_per_set"].get(name)
        lines.append(f"   {name:<16} model {pct(value):>8}   raw-pixel baseline {pct(base):>8}")
    lines.append(f"   {'mean':<16} model {pct(acc['final']):>8}   (best {pct(acc['best'])})   "
                 f"baseline {pct(summary['baseline/pixel_acc'])}")
    if acc["final"] is not None and summary["baseline/pixel_acc"] is not None:
        lines.append(f"   gain over raw pixels: {100 * (acc['final'] - summary['baseline/pixel_acc']):+.2f} points")
    lines += [f" outputs: {summary['output_dir']}  (summary.json, checkpoints/)", "=" * 64]
    return "\n".join(lines)
