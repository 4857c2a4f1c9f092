"""What each key of `train.py` and `eval.py` accepts: the one place that states it, checked right after the config
is composed, before any model is built, weights read or data set scanned.

`check_config(cfg, RULES)` walks the table: a key absent from the composed config (a group not chosen) is not
checked; a value that breaks its rule ends the command in one line naming the key (utils/errors.py). Paths are
taken from the working directory, as the runs take them, and checked for the layout their key needs
(cli/layouts.py). docs/usage.md's keys each have a rule here (tests/test_config_checks.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from elasticface.cli import layouts
from elasticface.utils.errors import BadValue
from elasticface.utils.rule_kinds import Address, ByChoice, Choice, Name, Number, Numbers, PathOf, Rule

ANY_INT = Number(integer=True, words=())
COUNT = Number(low=1, integer=True, words=())
FRACTION = Number(above=0, high=1, words=())
FAR = Number(above=0, high=1, words=())
BOOL = Choice((True, False))


def _doc(rule: Rule, doc: str) -> Rule:
    """A shared rule with what the key it checks does (`--help`'s line for that key)."""
    return replace(rule, doc=doc)


PAIRS_LIST = PathOf("a pairs list (lines `path1 path2 label`, or LFW's pairs.txt)", layouts.text_lines)
PAIRS_ROOT = PathOf("the folder the pairs list's paths are relative to", layouts.folder)
BIN_SETS = PathOf("a folder of insightface .bin sets", layouts.bin_sets_root,
                  doc="the folder of .bin verification sets (lfw.bin, cfp_fp.bin, agedb_30.bin)")
PEOPLE = PathOf("a folder of people, <person>/<image>", layouts.image_folder)
#: keys both commands read
COMMON: dict[str, Rule] = {
    "data.image_size": Number(low=16, high=1024, integer=True,
                              doc="every face resized to this size on the device (56: quick CPU runs); null: 112, "
                                  "or in eval a .ckpt's training size"),
}

# Each key's `doc` is what `--help` says it does, after the values its rule accepts (cli/help.py): a few words, the
# values' meaning where the rule lists them. docs/usage.md's table of keys repeats each rule's `describe()`.
TRAIN: dict[str, Rule] = {
    "data.root": ByChoice("data", {
        "recordio": PathOf("insightface's RecordIO folder (train.rec, train.idx, property)", layouts.recordio_root,
                           nullable=False),
        "folder": replace(PEOPLE, nullable=False)},
        doc="where the training faces are (data=folder_bin too; synthetic has none)"),
    "data.val_root": ByChoice("data", {"recordio": BIN_SETS}, doc="lfw.bin, cfp_fp.bin, ... to verify on; default: "
                                                                  "data.root"),
    "data.train_dataset.root": ByChoice("data", {"folder": replace(PEOPLE, each=True)},
                                        doc="data.root, or a list of folders of the same people: [blurred,sharp]"),
    "seed": Number(low=0, integer=True, words=(), doc="the random seed of data order, flips, margins and init"),
    **COMMON,
    "m": Number(doc="the head's margin; the head option sets its paper's (each head checks its own range)"),
    "s": Number(above=0, words=(None, "class_count"), doc="the head's scale; null: as scale= says"),
    "sigma": Number(low=0, doc="ElasticFace's margin standard deviation (0: ArcFace/CosFace)"),
    "scale": Choice(("class_count", "head"),
                    doc="s when s=null: class_count = AdaCos's √2·ln(C-1) for the C training classes; head = the "
                        "head's own (64 for ArcFace, CosFace, ElasticFace)"),
    "weights": PathOf("a model file to start the backbone from (.pth/.pt state_dict, MXNet model-0000.params)",
                      layouts.weights_file,
                      doc="fine-tune: the backbone starts from this released or exported file (architecture and "
                          "embedding size read off it) and finetune=recipe is selected (--help finetune)"),
    "weights_strict": Choice((True, False), doc="false: load the tensors of weights= that fit, log what was skipped"),
    "ckpt_path": PathOf("a Lightning checkpoint this project wrote", layouts.torch_checkpoint,
                        doc="continue training exactly where this checkpoint stopped"),
    "resume": Choice((None, "auto"), doc="auto: continue from the run folder's last checkpoint, skip a finished run"),
    "data.batch_size": Number(low=1, integer=True, words=(), doc="training images per step on each device"),
    "data.val_batch_size": Number(low=1, integer=True, words=(), doc="validation images per step"),
    "data.num_workers": Number(low=0, integer=True, words=("auto",),
                               doc="loader processes; auto: the cores this run may use, at most 4"),
    "data.train_dataset.max_corrupt": Number(low=0, integer=True,
                                             doc="unreadable images skipped over the run before it stops with an "
                                                 "error (data=folder, recordio)"),
    "data.train_dataset.max_pixels": Number(low=1, integer=True,
                                            doc="the most pixels an image header may declare, larger ones skipped "
                                                "as corrupt (a decompression bomb); null: 4096x4096"),
    "data.val_sets.pairs_file": _doc(PAIRS_LIST, "with data=folder: the pairs to verify on; null: none"),
    "data.val_sets.image_root": _doc(PAIRS_ROOT, "null: the pairs file's own folder"),
    "trainer.max_epochs": Number(low=1, integer=True, words=(None, -1), doc="epochs to train (-1: no limit)"),
    "trainer.max_steps": Number(low=1, integer=True, words=(-1,), doc="optimizer steps to train (-1: by epochs)"),
    "trainer.devices": Number(low=1, integer=True, words=("auto", -1),
                              doc="GPUs (or CPU processes) per node; auto, -1: all"),
    "trainer.num_nodes": _doc(COUNT, "machines of a multi-node run (SLURM, torchrun)"),
    "trainer.accumulate_grad_batches": _doc(COUNT, "steps whose gradients add up into one optimizer step"),
    "trainer.log_every_n_steps": _doc(COUNT, "steps between two logged values of the metrics"),
    "trainer.check_val_every_n_epoch": Number(low=1, integer=True, doc="epochs between two validations"),
    "trainer.gradient_clip_val": Number(above=0, doc="clip every parameter's gradient norm (model.clip_grad_norm "
                                                     "clips the backbone's); null: off"),
    "trainer.accelerator": Choice(("auto", "cpu", "gpu", "cuda", "mps", "tpu"),
                                  doc="where it trains; auto: a GPU when there is one"),
    "trainer.precision": Choice(("32-true", "32", 32, "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true",
                                 "transformer-engine"),
                                doc="the step's number format: 32-true fp32; bf16-mixed autocast (trainer=gpu, ddp); "
                                    "the heads and centres stay fp32"),
    "trainer.threads": Number(low=1, integer=True, words=("auto",), doc="torch threads per process; auto: the cores"),
    "optimizer.lr": Number(above=0, words=(), doc="the learning rate (at batch_scaling.reference_batch when set)"),
    "optimizer.momentum": Number(low=0, above=None, high=1, doc="SGD's momentum"),
    "optimizer.weight_decay": Number(low=0, doc="L2 weight decay (the paper's: 5e-4)"),
    "scheduler.gamma": Number(above=0, high=1, doc="the lr is multiplied by gamma at each milestone"),
    "scheduler.warmup_steps": Number(low=0, integer=True, doc="the lr rises linearly over these first steps"),
    "scheduler.warmup_fraction": Number(low=0, high=1, doc="or over this fraction of the run (0: no warm-up)"),
    "scheduler.milestone_fractions": Numbers(Number(above=0, high=1, words=()), nonempty=False,
                                             doc="the milestones as fractions of the run"),
    "model.embedding_size": Number(low=2, integer=True, words=(), doc="the embedding's size (512 in the paper)"),
    "model.backbone.name": Name("a model name in timm's registry (iresnet50, mobilefacenet, resnet18, ...)",
                                doc="the backbone: insightface's iresnet*/mobilefacenet* or any timm model"),
    "model.clip_grad_norm": Number(above=0, doc="clip the backbone's gradient norm at this, as the released code "
                                                "does; null: off"),
    "checkpoint.every_n_steps": _doc(COUNT, "a resumable checkpoint (last.ckpt) every N optimizer steps and at the "
                                            "end"),
    "checkpoint.keep": Number(low=0, integer=True, words=(),
                              doc="the newest N step checkpoints kept (besides last.ckpt and the best)"),
    "train.skip_nonfinite_steps": Number(low=0, integer=True, words=(),
                                         doc="steps with a non-finite loss or gradient skipped (counted) before the "
                                             "run stops"),
    "batch_scaling.reference_batch": Number(low=1, integer=True,
                                            doc="the global batch optimizer.lr and the step milestones are written "
                                                "for: at another, the lr scales linearly and the milestones move to "
                                                "the same images seen; null: as written"),
    "finetune.head_only_epochs": Number(low=0, words=(), doc="the first epochs (a fraction is fine) train the "
                                                             "centres and head only, the backbone held as loaded"),
    "finetune.l2sp_alpha": Number(low=0, words=(), doc="L2-SP: alpha/2·‖w - w0‖² pulls the backbone toward the "
                                                       "loaded weights w0, in place of its weight decay"),
    "finetune.backbone_lr_scale": Number(low=0, words=(),
                                         doc="the backbone learns at optimizer.lr x this (0 freezes it)"),
    "finetune.wise_alpha": Number(low=0, high=1, words=(),
                                  doc="WiSE-FT: after the last step the backbone becomes (1 - alpha)·w0 + alpha·w "
                                      "(1: as trained)"),
    "finetune.imprint_centers": _doc(BOOL, "class centres start at the loaded backbone's class means"),
    "finetune.freeze_backbone_bn": _doc(BOOL, "the backbone's BatchNorm layers keep their loaded statistics"),
    "pixel_baseline": _doc(BOOL, "also score the validation pairs with raw pixels as embeddings"),
    "eigenface_baseline": _doc(BOOL, "and with eigenfaces fitted on the training faces (a pass over them)"),
    "start_baseline": _doc(BOOL, "with weights=: score the loaded weights before the first step (each set's change "
                                 "in the summary)"),
    "halving.eta": Number(low=2, integer=True,
                          doc="successive halving of a sweep (-m): after each round the best 1/eta of the jobs go on "
                              "from their checkpoints to eta times the epochs; null: off (docs/sweeps.md)"),
    "halving.first_epochs": Number(low=1, integer=True, words=(),
                                   doc="the first round's epochs, shorter than trainer.max_epochs"),
    "halving.metric": Name("val/acc_mean or val/<set>/acc", doc="what each round ranks the jobs on"),
    "halving.stop_epoch": Number(low=1, integer=True,
                                 doc="set by the sweep for each round: the job stops after this epoch, to go on later"),
    "optuna_trial": Number(low=0, integer=True,
                           doc="set by hparams_search=elastic_optuna's sweeper for each job: the trial it reports "
                               "val/acc_mean to after each epoch, stopped when the pruner says so"),
    "logger.mlflow.tracking_uri": Address(
        "a folder, or a URI: http(s)://host:port, sqlite:///file.db, databricks, file:",
        ("http", "https", "sqlite", "databricks", "file"),  # loggers/mlflow_logger.py's SCHEMES (not imported: --help)
        doc="with logger=mlflow or many: a folder is a local store (default logs/mlflow), http://...: a tracking "
            "server"),
}

EVAL: dict[str, Rule] = {
    **COMMON,
    "data.val_root": _doc(BIN_SETS, "score the .bin verification sets in this folder that data.val_sets names "
                                    "([lfw,cfp_fp,agedb_30]; null: every .bin there)"),
    "weights": PathOf("a model file (.ckpt, backbone .pth/.pt, MXNet model-0000.params, TorchScript, .onnx)",
                      layouts.model_file, doc="the model file to evaluate, its type read off its first bytes"),
    "allow_torchscript": _doc(BOOL, "open a TorchScript file (a program: only one from a source you trust)"),
    "device": Choice(("auto", "cpu", "cuda"), doc="where the model runs; auto: cuda if available"),
    "channels_last": Choice(("auto", True, False),
                            doc="the model's memory layout; auto: NHWC where measured faster (train's rule)"),
    "batch_size": Number(low=1, integer=True, words=(), doc="faces per embedding batch"),
    "num_workers": Number(low=0, integer=True, words=(), doc="loader processes"),
    "flip": _doc(BOOL, "add the embedding of the horizontally flipped face (the standard protocol)"),
    "num_folds": Number(low=2, integer=True, words=(), doc="folds of the verification protocol (10)"),
    "far_target": _doc(FAR, "the FAR of the verification sets' TAR@FAR column"),
    "plots": _doc(BOOL, "save ROC and score-histogram PNGs next to the results"),
    "data.val_sets": None,  # names of .bin sets under data.val_root; a missing one is skipped with a warning
    "pairs_file": _doc(PAIRS_LIST, "score your own pairs, lines 'path1 path2 0|1' (with image_root=)"),
    "image_root": _doc(PAIRS_ROOT, "needed with pairs_file="),
    "pairs_name": Name("a name", nullable=True, doc="the pairs' row in the table; null: the pairs file's name"),
    "model.embedding_size": Number(low=2, integer=True, doc="a state_dict's embedding size; null: the file's"),
    "ijb.root": PathOf("insightface's IJB folder (<root>/IJBC/meta, loose_crop)", layouts.ijb_root,
                       doc="evaluate IJB-B/C: the folder holding <target>/meta and <target>/loose_crop"),
    "ijb.target": Choice(("IJBB", "IJBC"), doc="which of the two"),
    "ijb.protocol": Choice(("1v1", "1n", "both"),
                           doc="1v1: verification, TAR at each of ijb.fars; 1n: identification as insightface's "
                               "ijb_1n.py (G1+G2 gallery, mixed probes: rank-1/5/10, TPIR at ijb.fpirs); both: the "
                               "two from one embedding pass"),
    "ijb.fpirs": _doc(Numbers(FAR), "1:N: TPIR at these FPIR"),
    "ijb.fars": _doc(Numbers(FAR), "1:1: TAR at these FAR"),
    "ijb.use_detector_score": _doc(BOOL, "weight each face's embedding by its detector score (insightface's)"),
    "ijb.normalize_images": _doc(BOOL, "normalise each face's embedding before the templates are averaged"),
    "ijb.save_scores": _doc(BOOL, "also write <target>_scores.npy and _labels.npy"),
    "megaface.root": PathOf("insightface's megaface_testpack_v1.0", layouts.testpack,
                            doc="evaluate MegaFace and MegaFace (R): the testpack (facescrub_images/, "
                                "megaface_images/, *_lst, *_noises.txt)"),
    "megaface.templatelists": PathOf("the devkit's templatelists/ folder", layouts.templatelists,
                                     doc="the devkit's probe list and distractor sets; null: every listed probe, "
                                         "the sets drawn by megaface.seed"),
    "megaface.set": Number(low=1, integer=True, words=(),
                           doc="the devkit's distractor set: megaface_features_list.json_<size>_<set>"),
    "megaface.sizes": Numbers(Number(low=1, integer=True, words=()), nullable=False,
                              doc="rank-1 at each count of distractors"),
    "megaface.seed": Number(low=0, integer=True, words=(),
                            doc="draws the distractor sets without templatelists, and (R)'s noise"),
    "megaface.fars": _doc(Numbers(FAR, nullable=False), "TAR at these FAR, on the largest set"),
    "megaface.max_rank": _doc(COUNT, "the CMC's length"),
    "megaface.chunk": Number(low=1, integer=True, doc="distractors scored at a time; null: 8192 on a CPU, 65536 on "
                                                      "a GPU"),
    "megaface.dtype": Choice(("float16", "float32"), doc="distractor features in memory (float16: 1 GB per 10^6 of "
                                                        "512-d)"),
    "megaface.features": PathOf("a folder of gen_megaface.py's feature files", layouts.folder,
                                doc="score these feature files (<features>/facescrub/..., <features>/megaface/...) "
                                    "instead of embedding the images"),
    "megaface.algo": Name("a name", doc="the <algo> of the <image>_<algo>.bin feature files"),
    "megaface.devkit_out": Name("a folder to write", nullable=True,
                                doc="also write the devkit's feature files into <devkit_out>/feature_out(_clean)"),
    "tinyface.root": PathOf("TinyFace's test split (Probe/, Gallery_Match/, Gallery_Distractor/)", layouts.tinyface,
                            doc="evaluate TinyFace: the folder holding Probe/, Gallery_Match/ and Gallery_Distractor/, "
                                "or with them in aligned_pad_0.1_pad_high/ (AdaFace's aligned copy) or "
                                "tinyface/Testing_Set/"),
    "tinyface.ranks": Numbers(Number(low=1, integer=True, words=()), nullable=False,
                              doc="the identification rates reported, and the CMC to the largest"),
}
EVAL = {k: v for k, v in EVAL.items() if v is not None}


def _set(cfg: DictConfig, key: str) -> bool:
    return OmegaConf.select(cfg, key, default=None) not in (None, "")


def eval_inputs(cfg: DictConfig) -> None:
    """eval.py needs something to evaluate, and a model unless it scores MegaFace feature files alone."""
    inputs = ("data.val_root", "pairs_file", "ijb.root", "tinyface.root", "megaface.root")
    if not any(_set(cfg, key) for key in inputs):
        raise BadValue(f"nothing to evaluate: set one of {', '.join(k + '=...' for k in inputs)} (a folder of .bin "
                       f"sets, a pairs list with image_root=, insightface's IJB folder, TinyFace's test split, a "
                       f"MegaFace testpack)")
    if _set(cfg, "pairs_file") and not _set(cfg, "image_root"):
        raise BadValue("pairs_file= needs image_root= (the folder its paths are relative to)")
    features_only = _set(cfg, "megaface.features") and not any(_set(cfg, k) for k in inputs[:4])
    if not _set(cfg, "weights") and not features_only:
        raise BadValue("weights: no model file; give weights=<file> (a .ckpt, a backbone .pth/.pt, insightface's "
                       "MXNet model-0000.params, TorchScript or .onnx)")


def halving_rounds(cfg: DictConfig) -> None:
    """halving.* against the run's length and validation sets (sweeps/halving.py)."""
    from elasticface.sweeps.halving import plan

    plan(cfg)


#: the rules of several keys together, after each key's own: per command
TOGETHER = {"eval": (eval_inputs,), "train": (halving_rounds,)}


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
