"""A file is data: what a checkpoint may make this package build, checked before anything is built.

The module rebuilds its parts with Hydra's ``instantiate`` from the ``_target_`` strings its checkpoint
saved as hyperparameters, and Hydra imports and calls whatever such a string names. Configs the user types
(command line, their own YAML) keep Hydra's full power; a config read from a file may name only:

- this package's margin heads, through the heads registry (its classes and its build function),
- backbones through ``build_backbone`` or ``timm.create_model`` with a name in timm's registry (this
  package's iresnet*/mobilefacenet* included), without timm's downloads or checkpoint files,
- this package's class layers (``FullFC``, ``PartialFC``, ``ShardedFC``) and learning-rate schedules,
- ``torch.optim`` optimizers and ``torch.optim.lr_scheduler`` schedulers.

Targets are compared as strings: nothing a file names is imported to decide. The checkpoint itself is read
with ``torch.load(weights_only=True)`` from a local path only.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, TypeVar

import timm
import torch
import torch.optim
import torch.optim.lr_scheduler
from torch import nn

import elasticface.backbones as backbones
import elasticface.backbones.build as backbones_build
import elasticface.classifier as classifier
import elasticface.heads as heads
import elasticface.heads.registry as heads_registry
import elasticface.schedulers as schedulers
from elasticface.utils.errors import BadFile
from elasticface.utils.remote import refuse_remote

__all__ = ["UntrustedFileError", "allowed_targets", "build_from_checkpoint", "check_targets", "read_checkpoint"]

M = TypeVar("M", bound=nn.Module)

#: the keys Hydra's instantiate reads in a node, and the values a file may give them
_HYDRA_KEYS = {"_target_", "_args_", "_partial_", "_recursive_", "_convert_"}
_CONVERT_MODES = {"none", "partial", "object", "all"}
#: targets that take a timm model name, and the argument holding it
_TIMM_BUILDERS = {"build_backbone": "name", "create_model": "model_name"}
#: timm arguments that fetch or read files (hub downloads, checkpoint files): never from a file's config
_TIMM_FILE_ARGUMENTS = ("pretrained", "checkpoint_path", "pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")


class UntrustedFileError(BadFile):
    """A file asks for something a file may not: code, a target outside the allowlist, a remote read."""


def _public_callables(namespace: ModuleType, keep: Any) -> dict[str, Any]:
    return {n: v for n, v in vars(namespace).items() if not n.startswith("_") and callable(v) and keep(v)}


def _lazy_exports(namespace: ModuleType) -> dict[str, Any]:
    """The names a package exports on first use (PEP 562 `__getattr__`, as elasticface.heads does)."""
    if not hasattr(namespace, "__getattr__"):
        return {}
    return {n: getattr(namespace, n) for n in getattr(namespace, "__all__", ())}


@functools.lru_cache(maxsize=1)
def allowed_targets() -> frozenset[str]:
    """Every dotted name a file's ``_target_`` may use: each allowed object under its defining module and
    under each of the package namespaces that export it."""
    head_objects = {entry.load() for entry in heads_registry.HEADS.values()} | {heads.SubCenter}
    head_objects |= {v for n, v in vars(heads_registry).items() if n.startswith("build_") and callable(v)}
    allowed_objects = [
        *head_objects,
        backbones_build.build_backbone,
        timm.create_model,
        classifier.FullFC, classifier.PartialFC, classifier.ShardedFC,
        *_public_callables(schedulers, lambda v: getattr(v, "__module__", None) == schedulers.__name__).values(),
        *_public_callables(torch.optim, lambda v: isinstance(v, type) and issubclass(v, torch.optim.Optimizer))
        .values(),
        *_public_callables(torch.optim.lr_scheduler, lambda v: isinstance(v, type) and (
            issubclass(v, (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau))))
        .values(),
    ]
    ids = {id(o) for o in allowed_objects}
    names = {f"{o.__module__}.{o.__qualname__}" for o in allowed_objects}
    for namespace in (heads, heads_registry, backbones, backbones_build, classifier, schedulers, timm, timm.models,
                      torch.optim, torch.optim.lr_scheduler):
        members = vars(namespace) | _lazy_exports(namespace)
        names |= {f"{namespace.__name__}.{n}" for n, v in members.items() if id(v) in ids}
    return frozenset(names)


def _refuse(source: str, path: str, what: str) -> UntrustedFileError:
    return UntrustedFileError(
        f"{source}: {path or '<top>'}: {what}. A config read from a file may build only this package's heads, "
        f"backbones (timm's registry), class layers and schedules, and torch.optim / torch.optim.lr_scheduler "
        f"classes (elasticface.untrusted.allowed_targets); nothing was built. If you made this file yourself, "
        f"build the model from your own config instead"
    )


def _check_timm_node(node: Mapping[str, Any], target: str, source: str, path: str) -> None:
    argument = _TIMM_BUILDERS.get(target.rsplit(".", 1)[-1])
    if argument is None:
        return
    name = node.get(argument)
    if not isinstance(name, str) or not timm.is_model(name):
        raise _refuse(source, f"{path}.{argument}", f"{name!r} is not a model in timm's registry")
    for key in _TIMM_FILE_ARGUMENTS:
        if node.get(key):
            raise _refuse(source, f"{path}.{key}", f"{node[key]!r}: timm would download or read another file")


def check_targets(config: Any, source: str, path: str = "") -> None:
    """Refuse (UntrustedFileError naming ``source``, the key path and the target) any node of ``config``
    (plain dicts and lists, as a checkpoint holds them) that Hydra would build from something outside
    :func:`allowed_targets`."""
    if isinstance(config, str):
        if "${" in config:
            raise _refuse(source, path, f"{config!r} is an interpolation; a saved config holds resolved values")
        return
    if isinstance(config, (list, tuple)):
        for i, item in enumerate(config):
            check_targets(item, source, f"{path}[{i}]")
        return
    if not isinstance(config, Mapping):
        return
    if "_target_" in config:  # the outer target first: the error names what the file asked for
        target = config["_target_"]
        if not isinstance(target, str) or target not in allowed_targets():
            raise _refuse(source, f"{path}._target_" if path else "_target_", f"target {target!r} is not allowed")
        _check_timm_node(config, target, source, path or "_target_")
    for key, value in config.items():
        where = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str):
            raise _refuse(source, where, f"a key of type {type(key).__name__}")
        if key.startswith("_") and key.endswith("_") and key not in _HYDRA_KEYS:
            raise _refuse(source, where, "an instantiate option this loader does not take")
        check_targets(value, source, where)
    if not isinstance(config.get("_partial_", False), bool) or not isinstance(config.get("_recursive_", True), bool):
        raise _refuse(source, path, "_partial_ and _recursive_ must be true or false")
    if str(config.get("_convert_", "none")).lower() not in _CONVERT_MODES:
        raise _refuse(source, f"{path}._convert_", f"{config['_convert_']!r} is not a conversion mode")
    if "_args_" in config and not isinstance(config["_args_"], (list, tuple)):
        raise _refuse(source, f"{path}._args_", "expected a list")


def read_checkpoint(path: str | os.PathLike, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """A Lightning checkpoint read as data: a local file only, ``torch.load(weights_only=True)`` (tensors,
    numbers, strings and containers; a pickled object is refused unopened). ``mmap``: the tensors are mapped,
    not read, so checking a large file costs little."""
    text = refuse_remote(path, "checkpoint")
    if not os.path.isfile(text):
        raise FileNotFoundError(f"checkpoint {text} not found")
    from elasticface.backbones.weights import WeightsError, check_torch_file

    try:
        check_torch_file(text)  # a zip entry claiming more than the file holds would size torch's reads
    except WeightsError as err:
        raise UntrustedFileError(str(err)) from err
    try:
        checkpoint = torch.load(text, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f" ({found.group(1)})" if found else ""
        raise UntrustedFileError(
            f"{text}: holds pickled Python objects{what}, not only tensors and plain data; refused unopened, since "
            f"opening it would run code. A checkpoint this project wrote holds none"
        ) from None
    except Exception as err:  # noqa: BLE001 - torch's readers raise many types (IndexError, KeyError, ...)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UntrustedFileError(f"{text}: not a checkpoint torch.save wrote, or truncated "
                                 f"({type(err).__name__}: {first})") from err
    if not isinstance(checkpoint, dict):
        raise UntrustedFileError(f"{text}: not a Lightning checkpoint (holds a {type(checkpoint).__name__}, "
                                 f"expected a dict)")
    return checkpoint


def build_from_checkpoint(cls: type[M], path: str | os.PathLike, map_location: Any = None, strict: bool | None = None,
                          **overrides: Any) -> M:
    """``cls`` built from a checkpoint's hyperparameters (their targets checked first; ``overrides`` are the
    caller's own and unchecked), then loaded with its state: what Lightning's ``load_from_checkpoint`` does,
    with the checkpoint read as data."""
    if map_location is None:
        map_location = None if torch.cuda.is_available() else "cpu"
    checkpoint = read_checkpoint(path, map_location)
    if not isinstance(checkpoint.get("state_dict"), Mapping):
        raise UntrustedFileError(f"{path}: not a Lightning checkpoint of a model (no state_dict)")
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    check_targets({k: v for k, v in hparams.items() if k not in overrides}, f"{path} (hyper_parameters)")
    model = cls(**{**hparams, **overrides})
    if hasattr(model, "on_load_checkpoint"):
        model.on_load_checkpoint(checkpoint)
    model.load_state_dict(checkpoint["state_dict"], strict=getattr(model, "strict_loading", True)
                          if strict is None else strict)
    first = next((t for t in checkpoint["state_dict"].values() if isinstance(t, torch.Tensor)), None)
    return model.to(first.device) if first is not None else model
