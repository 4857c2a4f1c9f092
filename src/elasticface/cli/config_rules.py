"""What each key of `train.py` and `eval.py` accepts: the one place that states it, checked right after the config
is composed, before any model is built, weights read or data set scanned.

`check_config(cfg, RULES)` walks the table: a key absent from the composed config (a group not chosen) is not
checked; a value that breaks its rule ends the command in one line naming the key (utils/errors.py). Paths are
taken from the working directory, as the runs take them, and checked for the layout their key needs
(cli/layouts.py). docs/usage.md's keys each have a rule here (tests/test_config_checks.py).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from elasticface.cli import layouts
from elasticface.utils.errors import BadValue
from elasticface.utils.rule_kinds import ByChoice, Choice, Name, Number, Numbers, PathOf, Rule

ANY_INT = Number(integer=True, words=())
COUNT = Number(low=1, integer=True, words=())
FRACTION = Number(above=0, high=1, words=())
FAR = Number(above=0, high=1, words=())
BOOL = Choice((True, False))

PAIRS_LIST = PathOf("a pairs list (lines `path1 path2 label`, or LFW's pairs.txt)", layouts.text_lines)
BIN_SETS = PathOf("a folder of insightface .bin sets", layouts.bin_sets_root,
                  doc="the folder of .bin verification sets (lfw.bin, cfp_fp.bin, agedb_30.bin)")
#: keys both commands read
COMMON: dict[str, Rule] = {
    "seed": Number(low=0, integer=True, words=(), doc="the random seed of data order, flips, margins and init"),
    "data.image_size": Number(low=16, high=1024, integer=True, doc="faces resized to this size; null: 112"),
}

TRAIN: dict[str, Rule] = {
    "data.root": ByChoice("data", {
        "recordio": PathOf("insightface's RecordIO folder (train.rec, train.idx, property)", layouts.recordio_root,
                           nullable=False),
        "folder": PathOf("a folder of people, <person>/<image>", layouts.image_folder, nullable=False)},
        doc="the training data: a RecordIO folder (data=recordio) or a folder of people (data=folder)"),
    "data.val_root": ByChoice("data", {"recordio": BIN_SETS}),
    "data.train_dataset.root": ByChoice("data", {
        "folder": PathOf("a folder of people, <person>/<image>", layouts.image_folder, each=True)}),
    **COMMON,
    "m": Number(doc="the margin of the head (each head checks its own range)"),
    "s": Number(above=0, words=(None, "class_count"), doc="the scale; null: the scale rule (scale=) decides"),
    "sigma": Number(low=0, doc="ElasticFace's margin standard deviation (0: ArcFace/CosFace)"),
    "scale": Choice(("class_count", "head"), doc="s from the class count (AdaCos) or the head's own (64)"),
    "weights": PathOf("a model file to start the backbone from (.pth/.pt state_dict, MXNet model-0000.params)",
                      layouts.weights_file, doc="start the backbone from a released or exported model file"),
    "weights_strict": BOOL,
    "ckpt_path": PathOf("a Lightning checkpoint this project wrote", layouts.torch_checkpoint,
                        doc="continue training exactly where this checkpoint stopped"),
    "resume": Choice((None, "auto"), doc="auto: continue from the run folder's last checkpoint, skip a finished run"),
    "data.batch_size": Number(low=1, integer=True, words=(), doc="images per step on each device"),
    "data.val_batch_size": Number(low=1, integer=True, words=()),
    "data.num_workers": Number(low=0, integer=True, words=("auto",), doc="loader processes; auto: by the cores"),
    "data.train_dataset.max_corrupt": Number(low=0, integer=True),
    "data.train_dataset.max_pixels": Number(low=1, integer=True),
    "data.val_sets.pairs_file": PAIRS_LIST,
    "data.val_sets.image_root": PathOf("the folder the pairs list's paths are relative to", layouts.folder),
    "trainer.max_epochs": Number(low=1, integer=True, words=(None, -1), doc="epochs to train (-1: no limit)"),
    "trainer.max_steps": Number(low=1, integer=True, words=(-1,), doc="optimizer steps to train (-1: by epochs)"),
    "trainer.devices": Number(low=1, integer=True, words=("auto", -1)),
    "trainer.num_nodes": COUNT,
    "trainer.accumulate_grad_batches": COUNT,
    "trainer.log_every_n_steps": COUNT,
    "trainer.check_val_every_n_epoch": Number(low=1, integer=True),
    "trainer.gradient_clip_val": Number(above=0),
    "trainer.accelerator": Choice(("auto", "cpu", "gpu", "cuda", "mps", "tpu")),
    "trainer.precision": Choice(("32-true", "32", 32, "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true",
                                 "transformer-engine")),
    "trainer.threads": Number(low=1, integer=True, words=("auto",), doc="torch threads per process; auto: the cores"),
    "optimizer.lr": Number(above=0, words=(), doc="the learning rate at the reference batch"),
    "optimizer.momentum": Number(low=0, above=None, high=1),
    "optimizer.weight_decay": Number(low=0),
    "scheduler.gamma": Number(above=0, high=1),
    "scheduler.warmup_steps": Number(low=0, integer=True),
    "scheduler.warmup_fraction": Number(low=0, high=1),
    "scheduler.milestone_fractions": Numbers(Number(above=0, high=1, words=()), nonempty=False),
    "model.embedding_size": Number(low=2, integer=True, words=()),
    "model.backbone.name": Name("a model name in timm's registry (iresnet50, mobilefacenet, resnet18, ...)",
                                doc="the backbone: insightface's iresnet*/mobilefacenet* or any timm model"),
    "model.clip_grad_norm": Number(above=0),
    "checkpoint.every_n_steps": COUNT,
    "checkpoint.keep": Number(low=0, integer=True, words=()),
    "train.skip_nonfinite_steps": Number(low=0, integer=True, words=()),
    "batch_scaling.reference_batch": Number(low=1, integer=True),
    "finetune.head_only_epochs": Number(low=0, words=()),
    "finetune.l2sp_alpha": Number(low=0, words=()),
    "finetune.backbone_lr_scale": Number(low=0, words=()),
    "finetune.wise_alpha": Number(low=0, high=1, words=(), doc="WiSE-FT: 1 keeps the fine-tuned weights, 0 the loaded"),
    "finetune.imprint_centers": BOOL,
    "finetune.freeze_backbone_bn": BOOL,
}

EVAL: dict[str, Rule] = {
    **COMMON,
    "data.val_root": BIN_SETS,
    "weights": PathOf("a model file (.ckpt, backbone .pth/.pt, MXNet model-0000.params, TorchScript, .onnx)",
                      layouts.model_file, doc="the model file to evaluate, its type read off its first bytes"),
    "allow_torchscript": BOOL,
    "device": Choice(("auto", "cpu", "cuda"), doc="auto: cuda if available"),
    "channels_last": Choice(("auto", True, False)),
    "batch_size": Number(low=1, integer=True, words=()),
    "num_workers": Number(low=0, integer=True, words=()),
    "flip": BOOL,
    "num_folds": Number(low=2, integer=True, words=(), doc="folds of the verification protocol (10)"),
    "far_target": FAR,
    "plots": BOOL,
    "data.val_sets": None,  # names of .bin sets under data.val_root; a missing one is skipped with a warning
    "pairs_file": PAIRS_LIST,
    "image_root": PathOf("the folder the pairs list's paths are relative to", layouts.folder),
    "ijb.root": PathOf("insightface's IJB folder (<root>/IJBC/meta, loose_crop)", layouts.ijb_root),
    "ijb.target": Choice(("IJBB", "IJBC")),
    "ijb.protocol": Choice(("1v1", "1n", "both"), doc="1v1: TAR at FAR; 1n: identification (insightface's ijb_1n)"),
    "ijb.fpirs": Numbers(FAR),
    "ijb.fars": Numbers(FAR),
    "megaface.root": PathOf("insightface's megaface_testpack_v1.0", layouts.testpack),
    "megaface.templatelists": PathOf("the devkit's templatelists/ folder", layouts.templatelists),
    "megaface.set": Number(low=1, integer=True, words=()),
    "megaface.sizes": Numbers(Number(low=1, integer=True, words=())),
    "megaface.seed": Number(low=0, integer=True, words=()),
    "megaface.fars": Numbers(FAR),
    "megaface.max_rank": COUNT,
    "megaface.chunk": Number(low=1, integer=True),
    "megaface.dtype": Choice(("float16", "float32")),
    "megaface.features": PathOf("a folder of gen_megaface.py's feature files", layouts.folder),
}
EVAL = {k: v for k, v in EVAL.items() if v is not None}


def _set(cfg: DictConfig, key: str) -> bool:
    return OmegaConf.select(cfg, key, default=None) not in (None, "")


def eval_inputs(cfg: DictConfig) -> None:
    """eval.py needs something to evaluate, and a model unless it scores MegaFace feature files alone."""
    inputs = ("data.val_root", "pairs_file", "ijb.root", "megaface.root")
    if not any(_set(cfg, key) for key in inputs):
        raise BadValue(f"nothing to evaluate: set one of {', '.join(k + '=...' for k in inputs)} (a folder of .bin "
                       f"sets, a pairs list with image_root=, insightface's IJB folder, a MegaFace testpack)")
    if _set(cfg, "pairs_file") and not _set(cfg, "image_root"):
        raise BadValue("pairs_file= needs image_root= (the folder its paths are relative to)")
    features_only = _set(cfg, "megaface.features") and not any(_set(cfg, k) for k in inputs[:3])
    if not _set(cfg, "weights") and not features_only:
        raise BadValue("weights: no model file; give weights=<file> (a .ckpt, a backbone .pth/.pt, insightface's "
                       "MXNet model-0000.params, TorchScript or .onnx)")


#: the rules of several keys together, after each key's own: per command
TOGETHER = {"eval": (eval_inputs,), "train": ()}


def _value(cfg: DictConfig, key: str, strict: bool) -> tuple[bool, Any]:
    """(present, value) of a dotted key, interpolations resolved; absent when a group that holds it is not chosen,
    or (not `strict`) when its interpolation needs what only the running job has (Hydra's runtime)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_missing=False) if parent else cfg
    if not isinstance(node, DictConfig) or leaf not in node.keys():
        return False, None
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
    except InterpolationResolutionError as err:
        if not strict:
            return False, None
        raise BadValue(f"{key}: {str(err).splitlines()[0]}") from None
    except OmegaConfBaseException as err:
        raise BadValue(f"{key}: {str(err).splitlines()[0]}") from None
    return True, value


def check_keys(cfg: DictConfig, rules: dict[str, Rule], choices: dict[str, Any] | None = None,
               strict: bool = True) -> None:
    """Every key of `rules` that `cfg` holds, checked (`choices`: the config groups' options, for the rules that
    depend on them); the first broken rule raises naming its key."""
    for key, rule in rules.items():
        present, value = _value(cfg, key, strict)
        if present:
            rule.check(key, value, choices or {}) if isinstance(rule, ByChoice) else rule.check(key, value)


def check_config(cfg: DictConfig, rules: dict[str, Rule], choices: dict[str, Any] | None = None,
                 strict: bool = True) -> None:
    """`check_keys`, then the keys' rules together (eval.py needs something to evaluate)."""
    check_keys(cfg, rules, choices, strict)
    for together in TOGETHER["eval" if rules is EVAL else "train"]:
        together(cfg)
