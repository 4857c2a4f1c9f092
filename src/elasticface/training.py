"""The training job behind `python train.py`: build everything from the config, fit, write summary.json."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.accelerators import CPUAccelerator
from pytorch_lightning.callbacks import ModelSummary, ProgressBar
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from elasticface import batch_scaling
from elasticface.callbacks.progress import progress_bar
from elasticface.callbacks.divergence import DivergenceGuard
from elasticface.callbacks.grad_scaler import GradScalerMonitor
from elasticface.callbacks.model_summary import ParameterSummary
from elasticface.callbacks.run_overview import RunOverview
from elasticface.callbacks.throughput import Throughput
from elasticface.checkpointing import resume
from elasticface.checkpointing.atomic_save import AtomicCheckpointIO
from elasticface.checkpointing.images_seen import ImagesSeen
from elasticface.checkpointing.loader_resume import ResumeLoaderState
from elasticface.checkpointing.preemption import Preemption
from elasticface.data.datamodule import FaceDataModule
from elasticface.eval.baselines import eigenface_baseline, pixel_baseline, start_weights_baseline
from elasticface.finetune.head_only import head_only_steps
from elasticface.finetune.imprint import imprint_centers
from elasticface.loggers.run_names import group_choice
from elasticface.module import FaceRecognitionModule
from elasticface.run_summary import format_summary, make_summary
from elasticface.scale import CLASS_COUNT, check_scale, class_count_scale
from elasticface.utils.config import flatten, group_choices, validate_top_level
from elasticface.utils.console import print_config_mode, print_config_tree, quiet_library_noise
from elasticface.utils.instantiators import instantiate_callbacks, instantiate_loggers
from elasticface.utils.precision import FP16_MIXED, cpu_fp16_plugin
from elasticface.utils.requirements import check_cuda_request
from elasticface.utils.speed import check_cpu_precision, check_world_size
from elasticface.utils.threads import apply_threads, choose_threads

log = logging.getLogger(__name__)


def build_module(cfg: DictConfig, num_classes: int) -> FaceRecognitionModule:
    """`model._target_` built from the config as plain containers (they become the checkpoint's hparams);
    `s: class_count` becomes its number for these classes."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if model["head"].get("s") == CLASS_COUNT:
        model["head"]["s"] = class_count_scale(num_classes)
    return instantiate(model, num_classes=num_classes, _recursive_=False, _convert_="all")


def required_callbacks(cfg: DictConfig, configured: list[pl.Callback]) -> list[pl.Callback]:
    """What a run cannot do without, for a callbacks option that leaves it out (`callbacks=none`):

    - DivergenceGuard: a non-finite loss or gradient stops the run naming the step (or is skipped within
      `train.skip_nonfinite_steps`); NaN weights never get an accuracy.
    - ResumeLoaderState: a run resumed mid-epoch continues at the checkpoint's batch, not the epoch's first.
    - Throughput: summary.json's images_per_second.
    - ImagesSeen: a resume on another global batch keeps the schedule in images seen, or warns that it jumps.
    - a progress display while `trainer.enable_progress_bar`: a log line every N steps when stdout is a file.
    - ParameterSummary while `trainer.enable_model_summary` (Lightning's own would print `Total FLOPs: 0`).

    configs/callbacks/default.yaml lists all but the last, so for it this adds the summary only.
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
    """`trainer.threads` (auto, or a count) applied before anything is built; logs one line with the choice."""
    choice = choose_threads(cfg.trainer.get("threads", "auto"), processes=processes_sharing_cores(cfg))
    apply_threads(choice)
    return choice.threads


def build_trainer(cfg: DictConfig, overview: bool = False) -> tuple[pl.Trainer, Throughput]:
    """The trainer with the configured loggers and callbacks, plus the required ones (and the run's overview when
    `overview`), and atomic checkpoint writes. `trainer.threads` is this project's key (set_threads), not a Lightning
    Trainer argument."""
    loggers = instantiate_loggers(cfg.get("logger"))
    callbacks = instantiate_callbacks(cfg.get("callbacks"),
                                      has_logger=bool(loggers) or bool(cfg.trainer.get("fast_dev_run")))
    callbacks += required_callbacks(cfg, callbacks)
    if overview:
        names = {group: group_choice(cfg, group) for group in ("head", "backbone", "data", "optimizer")}
        names["scheduler"] = group_choice(cfg, "scheduler") if cfg.get("scheduler") is not None else "constant"
        callbacks.insert(0, RunOverview(cfg, names))
    throughput = next(c for c in callbacks if isinstance(c, Throughput))
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
    trainer = instantiate(trainer_cfg, callbacks=callbacks, logger=loggers or False, plugins=plugins, **extra)
    check_cpu_precision(trainer.precision, isinstance(trainer.accelerator, CPUAccelerator))
    return trainer, throughput


def start_backbone(cfg: DictConfig) -> tuple[torch.nn.Module | None, dict[str, Any] | None]:
    """`weights=<file>`: the backbone the file holds (its architecture and embedding size, unless the config chose
    them: elasticface.finetune.architecture), loaded from it, and what was loaded (file, SHA-256, architecture, what
    was skipped). Built before any data is read, so a wrong file fails at once, and under a forked random state, so
    the run's own draws (centres, head) match a run without weights."""
    path = cfg.get("weights")
    if not path:
        return None, None
    from elasticface.backbones.weights import load_backbone_weights
    from elasticface.finetune.architecture import fit_to_weights

    state, architecture = fit_to_weights(cfg, str(path))
    with torch.random.fork_rng(devices=[]):
        backbone = instantiate(cfg.model.backbone)
    report = load_backbone_weights(backbone, str(path), strict=bool(cfg.get("weights_strict", True)), state=state)
    log.info("backbone %s starts from %s (sha256 %s, %d tensors%s)", cfg.model.backbone.get("name"), report.path,
             report.sha256[:12], report.loaded, "" if report.strict else ", non-strict")
    return backbone, report.as_dict() | architecture


def check_head_only_phase(cfg: DictConfig) -> None:
    """A head-only phase as long as an epoch-bounded run stops here, before any data is read; the module checks
    it again in steps when fitting starts (a run bounded by trainer.max_steps)."""
    epochs = OmegaConf.select(cfg, "model.head_only_epochs", default=0) or 0
    if OmegaConf.select(cfg, "trainer.max_steps", default=-1) in (None, -1) and cfg.trainer.get("max_epochs"):
        head_only_steps(float(epochs), 1, int(cfg.trainer.max_epochs), unit="epochs")


def baseline_device(cfg: DictConfig) -> str:
    """Where a baseline embeds before training starts: this process's GPU when the run trains on GPUs."""
    if torch.cuda.is_available() and str(OmegaConf.select(cfg, "trainer.accelerator", default="auto")) != "cpu":
        return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return "cpu"


def hyperparameters(cfg: DictConfig, s: float | None) -> dict[str, Any]:
    """The resolved config, flattened, with the sweep axes (m, s, sigma) and the group choices up front; `s` the
    head's own (a number where the config says class_count)."""
    params: dict[str, Any] = {"m": cfg.get("m"), "s": s, "sigma": cfg.get("sigma"), "seed": cfg.get("seed")}
    params.update({f"choice/{k}": v for k, v in group_choices().items()})
    params.update(flatten(OmegaConf.to_container(cfg, resolve=True)))
    params["s"] = s
    return params


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train one model as the config says and return (and write) its summary."""
    check_scale(cfg)  # first: reading s resolves the scale rule
    validate_top_level(cfg)
    printing = print_config_mode(OmegaConf.select(cfg, "extras.print_config", default=False))
    quiet_library_noise()
    set_threads(cfg)
    if printing == "full":
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

    batch_scaling.apply(cfg)  # before anything reads optimizer.lr, the milestones or trainer.max_steps
    check_head_only_phase(cfg)
    start, weights = start_backbone(cfg)
    datamodule: FaceDataModule = instantiate(cfg.data)
    datamodule.setup("fit")
    model = build_module(cfg, datamodule.num_classes)
    if start is not None:
        model.backbone.load_state_dict(start.state_dict())
        if model.hparams.get("l2sp_alpha"):
            model.keep_start_weights()
        del start
    trainer, throughput = build_trainer(cfg, overview=printing is not None)
    params = hyperparameters(cfg, model.head.s)
    for logger in trainer.loggers:
        logger.log_hyperparams(params)

    baselines: dict[str, dict[str, float]] = {}
    rank_zero = trainer.is_global_zero  # only it writes summary.json: other ranks (srun tasks) skip the baselines
    if rank_zero and cfg.get("pixel_baseline"):
        baselines["pixel"] = {name: pixel_baseline(pairs) for name, pairs in datamodule.val_sets.items()}
    if rank_zero and cfg.get("eigenface_baseline") and datamodule.val_sets:
        baselines["eigenface"] = {name: eigenface_baseline(datamodule.train_set, pairs)
                                  for name, pairs in datamodule.val_sets.items()}
    if rank_zero and weights is not None and cfg.get("start_baseline", True) and datamodule.val_sets:
        # a fine-tune: where it starts, on its own pairs
        device = baseline_device(cfg)
        baselines["start"] = {name: start_weights_baseline(model.backbone, pairs, model.hparams.val_flip, device)
                              for name, pairs in datamodule.val_sets.items()}
    if baselines:
        log.info("baselines (%s) computed on global rank %d", ", ".join(baselines), trainer.global_rank)
    if model.hparams.get("imprint_centers") and ckpt_path is None:  # a resumed run's centres come from its checkpoint
        started = time.perf_counter()
        imprint_centers(model, datamodule.train_set, datamodule.val_batch_size, datamodule.image_size,
                        baseline_device(cfg))
        log.info("class centres imprinted: the mean of the backbone's embeddings of each of the %d classes (%.0f s)",
                 datamodule.num_classes, time.perf_counter() - started)

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
    summary["weights"] = weights  # the file the backbone started from, with its SHA-256 (None: random init)
    if weights and "backbone" in weights["read_off_the_file"]:
        summary["backbone"] = weights["backbone"]  # the file's architecture, not the config's default option
    if trainer.is_global_zero:
        (output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        log.info(format_summary(summary))
    return summary
