"""The training job behind `python train.py`, in four phases as `run` reads: resolve the config (every check and
rewrite), build the data, model and trainer, fit, summarize (summary.json and the console's table)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.accelerators import CPUAccelerator
from pytorch_lightning.callbacks import ModelSummary, ProgressBar
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from elasticface import batch_scaling
from elasticface.backbones.from_weights import backbone_from_weights
from elasticface.callbacks.baselines import Baselines
from elasticface.callbacks.compiled_steps import CompiledSteps
from elasticface.callbacks.progress import progress_bar
from elasticface.callbacks.divergence import DivergenceGuard
from elasticface.callbacks.epoch_budget import EpochBudget
from elasticface.callbacks.grad_scaler import GradScalerMonitor
from elasticface.callbacks.model_summary import ParameterSummary
from elasticface.callbacks.run_overview import RunOverview
from elasticface.callbacks.step_statistics import StepStatistics
from elasticface.callbacks.throughput import Throughput
from elasticface.checkpointing import resume
from elasticface.checkpointing.atomic_save import AtomicCheckpointIO
from elasticface.checkpointing.images_seen import ImagesSeen
from elasticface.checkpointing.loader_resume import ResumeLoaderState
from elasticface.checkpointing.preemption import Preemption
from elasticface.data.datamodule import FaceDataModule, loader_workers
from elasticface.finetune.config import StartWeights, resolve as resolve_finetune
from elasticface.finetune.phases import FineTuning
from elasticface.loggers.mlflow_logger import MLflowLogger
from elasticface.loggers.run_names import group_choice
from elasticface.module import FaceRecognitionModule
from elasticface.run_summary import format_summary, make_summary
from elasticface.scale import CLASS_COUNT, check_scale, class_count_scale
from elasticface.sweeps.optuna_study import TRIAL_KEY
from elasticface.sweeps.trial_pruning import TrialPruning, trial_pruning
from elasticface.utils.config import flatten, group_choices, validate_top_level
from elasticface.utils.console import print_config_mode, print_config_tree, quiet_library_noise, quiet_resume_noise
from elasticface.utils.instantiators import instantiate_callbacks, instantiate_loggers
from elasticface.utils.no_profiler import NoProfiler
from elasticface.utils.precision import FP16_MIXED, cpu_fp16_plugin
from elasticface.utils.requirements import check_cuda_request
from elasticface.utils.speed import check_cpu_precision, check_world_size
from elasticface.utils.threads import apply_threads, choose_threads

log = logging.getLogger(__name__)


def build_module(cfg: DictConfig, num_classes: int, backbone: torch.nn.Module | None = None) -> FaceRecognitionModule:
    """`model._target_` built from the config as plain containers (they become the checkpoint's hparams), around
    `backbone` when it is built already; `s: class_count` becomes its number for these classes."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if model["head"].get("s") == CLASS_COUNT:
        model["head"]["s"] = class_count_scale(num_classes)
    return instantiate(model, num_classes=num_classes, built_backbone=backbone, _recursive_=False, _convert_="all")


def required_callbacks(cfg: DictConfig, configured: list[pl.Callback]) -> list[pl.Callback]:
    """What a run cannot do without, for a callbacks option that leaves it out (`callbacks=none`):

    - DivergenceGuard: a non-finite loss or gradient stops the run naming the step (or is skipped within
      `train.skip_nonfinite_steps`); NaN weights never get an accuracy.
    - ResumeLoaderState: a run resumed mid-epoch continues at the checkpoint's batch, not the epoch's first.
    - Throughput: summary.json's images_per_second.
    - ImagesSeen: a resume on another global batch keeps the schedule in images seen, or warns that it jumps.
    - a progress display while `trainer.enable_progress_bar`: a log line every N steps when stdout is a file.
    - ParameterSummary while `trainer.enable_model_summary` (Lightning's own would print `Total FLOPs: 0`).
    - StepStatistics: the training step's statistics in the logs (the loss, θ_y, margins, gradient norms).
    - CompiledSteps: summary.json's `compiled`, counted.
    - EpochBudget while `halving.stop_epoch` is set: a sweep round's budget (sweeps/halving.py).
    - TrialPruning while `optuna_trial` is set: an Optuna trial that its pruner may stop (sweeps/optuna_study.py).

    configs/callbacks/default.yaml lists the first four, so for it this adds the rest.
    """
    def missing(kind: type) -> bool:
        return not any(isinstance(c, kind) for c in configured)

    required: list[pl.Callback] = []
    if missing(DivergenceGuard):
        required.append(DivergenceGuard(int((cfg.get("train") or {}).get("skip_nonfinite_steps", 0))))
    if missing(ResumeLoaderState):
        required.append(ResumeLoaderState())
    if missing(Throughput):
        required.append(Throughput())
    if missing(ImagesSeen):
        required.append(ImagesSeen(OmegaConf.select(cfg, batch_scaling.KEY)))
    if cfg.trainer.get("enable_progress_bar", True) and missing(ProgressBar):
        required.append(progress_bar(log_every_n_steps=cfg.trainer.get("log_every_n_steps") or 10))
    if cfg.trainer.get("enable_model_summary", True) and missing(ModelSummary):
        required.append(ParameterSummary())
    if missing(StepStatistics):
        required.append(StepStatistics())
    if missing(CompiledSteps):
        required.append(CompiledSteps())
    stop_epoch = OmegaConf.select(cfg, "halving.stop_epoch", default=None)
    if stop_epoch is not None and missing(EpochBudget):
        required.append(EpochBudget(stop_epoch))
    trial = OmegaConf.select(cfg, TRIAL_KEY, default=None)
    if trial is not None and missing(TrialPruning):
        required.append(trial_pruning(trial))
    return required


def processes_per_node(trainer_cfg: DictConfig) -> int:
    """How many training processes this node runs (they share its cores): `trainer.devices` under a DDP
    strategy, else one. `devices: auto` or -1 on a CPU is one process per core, on GPUs one per GPU."""
    if "ddp" not in str(trainer_cfg.get("strategy", "auto")):
        return 1
    devices = trainer_cfg.get("devices", 1)
    if OmegaConf.is_list(devices) or isinstance(devices, (list, tuple)):
        return max(1, len(devices))
    if isinstance(devices, str) and "," in devices:
        return max(1, len([d for d in devices.split(",") if d.strip()]))
    if devices in ("auto", -1, "-1"):
        on_gpu = trainer_cfg.get("accelerator") != "cpu" and torch.cuda.is_available()
        return max(1, torch.cuda.device_count()) if on_gpu else 1
    return max(1, int(devices))


def processes_sharing_cores(cfg: DictConfig) -> int:
    """This node's training processes (DDP) times the sweep jobs running beside this one (`parallel_jobs`,
    which launcher=joblib sets): together they share the node's cores."""
    return processes_per_node(cfg.trainer) * int(cfg.get("parallel_jobs") or 1)


def set_threads(cfg: DictConfig) -> int:
    """`trainer.threads` (auto, or a count) applied before anything is built; logs one line with the choice. The
    loader's `data.num_workers=auto` becomes its count for the same cores and processes."""
    processes = processes_sharing_cores(cfg)
    choice = choose_threads(cfg.trainer.get("threads", "auto"), processes=processes)
    apply_threads(choice)
    if OmegaConf.select(cfg, "data.num_workers") is not None:
        cfg.data.num_workers = loader_workers(cfg.data.num_workers, processes)
    return choice.threads


def build_trainer(cfg: DictConfig, overview: bool = False, starting: list[pl.Callback] | None = None
                  ) -> tuple[pl.Trainer, Throughput]:
    """The trainer with the configured loggers and callbacks, plus the required ones, and atomic checkpoint writes.
    First come the run's overview (when `overview`), the step's statistics (the progress lines print what they
    log) and `starting` (the baselines and a fine-tune's phases: after the overview, before the first step).
    `trainer.threads` is this project's key (set_threads), not a Lightning Trainer argument."""
    loggers = instantiate_loggers(cfg.get("logger"))
    callbacks = instantiate_callbacks(cfg.get("callbacks"),
                                      has_logger=bool(loggers) or bool(cfg.trainer.get("fast_dev_run")))
    callbacks += required_callbacks(cfg, callbacks)
    statistics = [c for c in callbacks if isinstance(c, StepStatistics)]
    callbacks = statistics + list(starting or []) + [c for c in callbacks if not isinstance(c, StepStatistics)]
    if overview:
        names = {group: group_choice(cfg, group) for group in ("head", "data", "optimizer")}
        names["backbone"] = str(OmegaConf.select(cfg, "model.backbone.name", default=group_choice(cfg, "backbone")))
        names["scheduler"] = group_choice(cfg, "scheduler") if cfg.get("scheduler") is not None else "constant"
        callbacks.insert(0, RunOverview(cfg, names))
    check_world_size(cfg.trainer.get("num_nodes", 1), cfg.trainer.get("devices"))
    check_cuda_request("trainer.accelerator", cfg.trainer.get("accelerator"))
    plugins: list[Any] = [AtomicCheckpointIO()]
    extra: dict[str, Any] = {}
    fp16_cpu = cpu_fp16_plugin(cfg.trainer.get("precision"), cfg.trainer.get("accelerator"))
    if fp16_cpu is not None:  # Lightning would run bf16 instead; the plugin replaces the precision flag
        plugins.append(fp16_cpu)
        extra["precision"] = None
    if str(cfg.trainer.get("precision")) in FP16_MIXED and not any(isinstance(c, GradScalerMonitor) for c in callbacks):
        callbacks.append(GradScalerMonitor())
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg.pop("threads", None)  # this project's key (utils/threads.py), not the Trainer's
    trainer_cfg["enable_model_summary"] = False  # required_callbacks adds ours in place of Lightning's
    if trainer_cfg.get("profiler") is None:
        trainer_cfg.pop("profiler", None)
        extra["profiler"] = NoProfiler()
    trainer = instantiate(trainer_cfg, callbacks=callbacks, logger=loggers or False, plugins=plugins, **extra)
    check_cpu_precision(trainer.precision, isinstance(trainer.accelerator, CPUAccelerator))
    return trainer, next(c for c in callbacks if isinstance(c, Throughput))


def hyperparameters(cfg: DictConfig, s: float | None) -> dict[str, Any]:
    """The resolved config, flattened, with the sweep axes (m, s, sigma) and the group choices up front; `s` the
    head's own (a number where the config says class_count)."""
    params: dict[str, Any] = {"m": cfg.get("m"), "s": s, "sigma": cfg.get("sigma"), "seed": cfg.get("seed")}
    params.update({f"choice/{k}": v for k, v in group_choices().items()})
    params.update(flatten(OmegaConf.to_container(cfg, resolve=True)))
    params["s"] = s
    return params


@dataclass
class Job:
    """What `build` makes from the resolved config: the data, the model and the trainer."""

    datamodule: FaceDataModule
    model: FaceRecognitionModule
    trainer: pl.Trainer
    weights: dict[str, Any] | None  # the file the backbone started from (None: random init)
    params: dict[str, Any]  # the hyperparameters the loggers got


def check_head(cfg: DictConfig) -> None:
    """The head's own range checks (m for its family, sigma, its options), before any data is read: the head is
    built once from the config and dropped (s: class_count is known only from the data, any valid scale stands in)."""
    head = OmegaConf.to_container(cfg.model.head, resolve=True)
    if head.get("s") == CLASS_COUNT:
        head["s"] = 64.0
    instantiate(head)


def resolve(cfg: DictConfig) -> tuple[str | None, StartWeights | None]:
    """Every check and rewrite of `cfg`, in one place and in this order, before anything is built or read: the
    scale rule, the top-level values, torch's threads and the loader's workers, the lr and milestones for the global
    batch, the fine-tune's parts and the architecture its weights file holds; then the config is read-only. Returns
    how the console prints (None: not at all) and the weights file read."""
    check_scale(cfg)  # first: reading s resolves the scale rule
    validate_top_level(cfg)
    check_head(cfg)
    printing = print_config_mode(OmegaConf.select(cfg, "extras.print_config", default=False))
    quiet_library_noise()
    set_threads(cfg)
    batch_scaling.apply(cfg)  # before anything reads optimizer.lr, the milestones or trainer.max_steps
    start = resolve_finetune(cfg)
    OmegaConf.set_readonly(cfg, True)  # resolved once: nothing after this point rewrites the config
    if printing == "full":
        print_config_tree(cfg, group_choices())
    return printing, start


def build(cfg: DictConfig, start: StartWeights | None, overview: bool) -> Job:
    """The data, the model (its backbone built once, from the weights file when there is one) and the trainer with
    its callbacks: the overview, the baselines and the fine-tune's phases among them."""
    pl.seed_everything(cfg.seed, workers=True)
    weights, backbone = None, None
    if start is not None:  # before any data is read: a file that does not fit the backbone fails at once
        backbone, report = backbone_from_weights(start.path, OmegaConf.to_container(cfg.model.backbone, resolve=True),
                                                 cfg.model.embedding_size, strict=bool(cfg.get("weights_strict", True)),
                                                 state=start.state)
        log.info("backbone %s starts from %s (sha256 %s, %d tensors%s)", start.architecture["backbone"],
                 report.path, report.sha256[:12], report.loaded, "" if report.strict else ", non-strict")
        weights = report.as_dict() | start.architecture
    datamodule: FaceDataModule = instantiate(cfg.data)
    datamodule.setup("fit")
    model = build_module(cfg, datamodule.num_classes, backbone)
    starting: list[pl.Callback] = [Baselines(pixel=bool(cfg.get("pixel_baseline")),
                                             eigenface=bool(cfg.get("eigenface_baseline")),
                                             start=start is not None and bool(cfg.get("start_baseline", True)))]
    tuning = FineTuning(**OmegaConf.to_container(cfg.finetune, resolve=True)) if cfg.get("finetune") else None
    if tuning is not None and tuning.changes_training:
        starting.append(tuning)
    trainer, _ = build_trainer(cfg, overview=overview, starting=starting)
    params = hyperparameters(cfg, model.head.s)
    for logger in trainer.loggers:
        logger.log_hyperparams(params)
    return Job(datamodule, model, trainer, weights, params)


def fit(job: Job, ckpt_path: str | None) -> float | None:
    """Lightning's fit, and a last validation when the run stopped between two; the seconds it took, or None when
    the run was preempted (no summary: it continues from its checkpoint)."""
    started = time.perf_counter()
    job.trainer.fit(job.model, datamodule=job.datamodule, ckpt_path=ckpt_path)
    preemption = next((c for c in job.trainer.callbacks if isinstance(c, Preemption)), None)
    if preemption is not None and preemption.preempted:
        log.warning("preempted at step %d: not finished, no summary.json; start it again with resume=auto "
                    "(or ckpt_path=<last.ckpt>) to continue", job.trainer.global_step)
        return None
    if job.datamodule.val_sets and job.model.validated_at_step != job.trainer.global_step:
        # stopped between validations (max_steps mid-epoch, max_time): score the final weights too
        job.trainer.validate(job.model, datamodule=job.datamodule, verbose=False)
    return time.perf_counter() - started


def summarize(cfg: DictConfig, job: Job, train_seconds: float) -> dict[str, Any]:
    """summary.json (written by global rank 0) and the console's table."""
    summary = make_summary(cfg, job.trainer, job.model, train_seconds, job.params)
    summary["weights"] = job.weights  # the file the backbone started from, with its SHA-256 (None: random init)
    if job.weights and "backbone" in job.weights["read_off_the_file"]:
        summary["backbone"] = job.weights["backbone"]  # the file's architecture, not the config's default option
    if job.trainer.is_global_zero:
        from elasticface.utils.output_paths import atomic_write  # whole or not at all: a kill leaves none or all

        summary_file = Path(cfg.paths.output_dir) / "summary.json"
        atomic_write(summary_file, json.dumps(summary, indent=2, default=str))
        for logger in job.trainer.loggers:  # MLflow keeps summary.json as an artifact, the checkpoints' paths as tags
            if isinstance(logger, MLflowLogger):
                logger.log_run_summary(summary_file, summary)
        log.info(format_summary(summary))
    return summary


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train one model as the config says and return (and write) its summary: resolve, build, fit, summarize."""
    printing, start = resolve(cfg)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = Path(OmegaConf.select(cfg, "callbacks.run_checkpoint.dirpath", default=None)
                          or output_dir / "checkpoints")
    ckpt_path, finished = resume.resolve(cfg.get("resume"), cfg.get("ckpt_path"), output_dir, checkpoint_dir,
                                         stop_epoch=OmegaConf.select(cfg, "halving.stop_epoch", default=None))
    if finished is not None:
        log.info(format_summary(finished))
        return finished
    if ckpt_path is not None:
        quiet_resume_noise()
    job = build(cfg, start, overview=printing is not None)
    train_seconds = fit(job, ckpt_path)
    if train_seconds is None:
        return {"preempted": True, "global_step": job.trainer.global_step,
                "val/acc_mean": {"best": None, "final": None}}
    return summarize(cfg, job, train_seconds)
