"""insightface's MXNet model zoo (``model-symbol.json`` + ``model-0000.params``) as a backbone state_dict.

The classic released models are LResNet{34,50,100}E-IR (insightface's ``fresnet`` symbol: version_unit 3,
output "E") and MobileFaceNet "y1" (``fmobilefacenet``, 64/128 channels, 128-d). Their layers map one to
one onto this package's ``iresnet*`` and ``mobilefacenet*`` modules; what differs is folded into the
weights, so the result is a plain insightface-layout state_dict that loads strictly, embeds and exports
like any released ``.pth``:

- the graph's own input scaling, ``(x - 127.5) * 0.0078125`` on RGB in [0, 255], against this package's
  ``(x / 255 - 0.5) / 0.5``: the ratio scales the first convolution (no bias, zero padding: exact);
- MXNet's BatchNorm eps (its default 1e-3, 2e-5 where the symbol says so) against torch's 1e-5: the
  difference is added to the running variance, which gives the same ``var + eps``;
- ``fix_gamma=True`` (MXNet's default; the embedding BatchNorm ``fc1``): the scale is 1 whatever is stored;
- y1's embedding Linear has a bias where MobileFaceNet's has none: it is folded into the next BatchNorm's mean.

The symbol is checked before anything is loaded: every operator feeding ``fc1`` must be one the mapping knows,
and every convolution's kernel, stride, padding and groups must equal the matched backbone's.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from elasticface.utils.errors import BadFile

from .layout import layout_of, match_backbone
from .mxnet_params import read_mxnet_params

__all__ = ["MXNetModelError", "mxnet_state_dict", "symbol_path_for"]

#: torch's BatchNorm eps, used by every backbone of this package
TORCH_BN_EPS = 1e-5
#: MXNet BatchNorm's defaults when the symbol does not record them
MXNET_BN_EPS, MXNET_FIX_GAMMA = 1e-3, True
#: operators a zoo model's embedding graph may contain (the rest are refused by name)
_KNOWN_OPS = {"null", "Convolution", "BatchNorm", "LeakyReLU", "FullyConnected", "elemwise_add", "_Plus", "_plus",
              "Dropout", "Flatten", "identity", "_copy", "_minus_scalar", "_mul_scalar", "_div_scalar", "_plus_scalar"}
_SCALAR_OPS = {"identity", "_copy", "_minus_scalar", "_mul_scalar", "_div_scalar", "_plus_scalar"}


class MXNetModelError(BadFile, ValueError):
    """An MXNet model the mapping cannot load; the message names the file and the layer."""


# -- the symbol ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    op: str
    name: str
    attrs: dict[str, str]
    inputs: tuple[int, ...]


def symbol_path_for(params_path: str) -> str:
    """``<prefix>-symbol.json`` for ``<prefix>-<epoch>.params`` (MXNet's checkpoint naming), else the one
    ``*-symbol.json`` in the same folder."""
    match = re.match(r"^(.*)-\d+\.params$", params_path)
    if match and os.path.isfile(match.group(1) + "-symbol.json"):
        return match.group(1) + "-symbol.json"
    found = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(params_path)), "*-symbol.json")))
    if len(found) == 1:
        return found[0]
    raise MXNetModelError(
        f"{params_path}: an MXNet parameter file needs its symbol (the graph) to say which architecture it is; "
        f"expected {match.group(1) + '-symbol.json' if match else '<prefix>-symbol.json'} beside it"
        + (f", found several: {', '.join(found)}" if found else ""))


def _read_symbol(path: str) -> list[_Node]:
    try:
        with open(path, encoding="utf-8") as f:
            graph = json.load(f)
        raw_nodes = graph["nodes"]
        nodes = []
        for index, raw in enumerate(raw_nodes):
            attrs: dict[str, str] = {}
            for key in ("param", "attr", "attrs"):  # MXNet < 0.9 wrote "param"/"attr", later "attrs"
                attrs.update(raw.get(key) or {})
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
                raise TypeError(f"node {index} has attributes that are not strings")
            op, name, inputs = raw["op"], raw["name"], tuple(int(i[0]) for i in raw["inputs"])
            if not isinstance(op, str) or not isinstance(name, str):
                raise TypeError(f"node {index}: op and name must be strings")
            if not all(0 <= i < index for i in inputs):  # a graph lists each node after its inputs: no cycle
                raise ValueError(f"node {index} ({name}) reads nodes {list(inputs)}; expected earlier nodes")
            nodes.append(_Node(op, name, attrs, inputs))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, IndexError, ValueError,
            AttributeError, RecursionError, OverflowError) as err:  # OverflowError: int() of an infinite number
        raise MXNetModelError(f"{path}: not an MXNet symbol file (a JSON graph with 'nodes' of op, name and "
                              f"inputs): {type(err).__name__}: {err}") from err
    return nodes


def _subgraph(nodes: list[_Node], output: int) -> list[int]:
    """Indices of the nodes ``output`` depends on, itself included, in graph order."""
    seen, stack = set(), [output]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(nodes[i].inputs)
    return sorted(seen)


def _tuple(node: _Node, key: str, default: tuple[int, ...], path: str = "") -> tuple[int, ...]:
    value = node.attrs.get(key)
    if not value:
        return default
    try:
        parsed = ast.literal_eval(value) if len(value) <= 64 else None
        if not isinstance(parsed, (tuple, list)) or not all(type(v) is int for v in parsed):
            raise ValueError("not a tuple of integers")
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as err:
        raise MXNetModelError(f"{path}: layer {node.name} has {key}={value[:64]!r}; expected a tuple of integers such "
                              f"as (3, 3) ({err})") from None
    return tuple(parsed)


def _number(node: _Node, key: str, default: float, path: str) -> float:
    """A finite number attribute of a layer; MXNetModelError naming the symbol file and the layer."""
    value = node.attrs.get(key)
    try:
        number = default if value is None else float(value)
    except ValueError:
        number = float("nan")
    if not np.isfinite(number):
        raise MXNetModelError(f"{path}: layer {node.name} has {key}={value!r}; expected a finite number")
    return number


def _flag(node: _Node, key: str, default: bool) -> bool:
    value = node.attrs.get(key)
    return default if value is None else value.strip().lower() in ("true", "1")


# -- layer names -> module paths -------------------------------------------------------------------------


def _fresnet_path(name: str) -> str | None:
    fixed = {"conv0": "conv1", "bn0": "bn1", "relu0": "prelu", "bn1": "bn2", "pre_fc1": "fc", "fc1": "features"}
    if name in fixed:
        return fixed[name]
    match = re.fullmatch(r"stage(\d)_unit(\d+)_(bn1|conv1|bn2|relu1|conv2|bn3|conv1sc|sc)", name)
    if not match:
        return None
    part = {"relu1": "prelu", "conv1sc": "downsample.0", "sc": "downsample.1"}.get(match.group(3), match.group(3))
    return f"layer{match.group(1)}.{int(match.group(2)) - 1}.{part}"


_Y1_GROUPS = {"dconv_23": "layers.2", "res_3": "layers.3", "dconv_34": "layers.4", "res_4": "layers.5",
              "dconv_45": "layers.6", "res_5": "layers.7", "res_2": "layers.1"}
_Y1_PART = {"conv2d": "0", "batchnorm": "1", "relu": "2"}
_Y1_INNER = {"conv_sep": "0", "conv_dw": "1", "conv_proj": "2"}


def _y1_path(name: str) -> str | None:
    if name in ("pre_fc1", "fc1"):
        return {"pre_fc1": "features.layers.2", "fc1": "features.layers.3"}[name]
    match = re.fullmatch(r"(.+)_(conv2d|batchnorm|relu)", name)
    if not match:
        return None
    block, part = match.group(1), _Y1_PART[match.group(2)]
    fixed = {"conv_1": "layers.0", "conv_2_dw": "layers.1", "conv_6sep": "conv_sep", "conv_6dw7_7": "features.layers.0"}
    if block in fixed:
        return f"{fixed[block]}.layers.{part}"
    match = re.fullmatch(r"(dconv_\d\d|res_\d)(?:_block(\d+))?_(conv_sep|conv_dw|conv_proj)", block)
    if not match or match.group(1) not in _Y1_GROUPS or (match.group(2) is None) != match.group(1).startswith("dconv"):
        return None
    group = _Y1_GROUPS[match.group(1)]
    inner = f"layers.{_Y1_INNER[match.group(3)]}.layers.{part}"
    return f"{group}.{inner}" if match.group(2) is None else f"{group}.layers.{match.group(2)}.{inner}"


@dataclass(frozen=True)
class _Architecture:
    name: str
    marker: tuple[str, ...]               # node names that identify it
    path: Callable[[str], str | None]     # MXNet layer name -> module path
    first_conv: str                       # module path of the convolution that sees the input
    fc_bias_into: str | None = None       # the BatchNorm that absorbs the embedding Linear's bias


_ARCHITECTURES = (
    _Architecture("fresnet (LResNet-E-IR)", ("conv0", "stage1_unit1_bn1", "pre_fc1", "fc1"), _fresnet_path, "conv1"),
    _Architecture("fmobilefacenet (MobileFaceNet, y1)", ("conv_1_conv2d", "conv_6sep_conv2d", "pre_fc1", "fc1"),
                  _y1_path, "layers.0.layers.0", fc_bias_into="features.layers.3"),
)


# -- conversion ------------------------------------------------------------------------------------------


def _input_scale(nodes: list[_Node], conv: int, path: str) -> float:
    """The factor ``k`` with (the first convolution's input) = k * (this package's input), from the graph's scalar
    ops between ``data`` and that convolution; refuses an offset that cannot be folded."""
    if not nodes[conv].inputs:
        raise MXNetModelError(f"{path}: the first convolution {nodes[conv].name} has no input")
    scale, shift, i = 1.0, 0.0, nodes[conv].inputs[0]
    chain = []
    while nodes[i].op != "null":  # inputs are earlier nodes (_read_symbol): the walk ends
        node = nodes[i]
        if node.op not in _SCALAR_OPS or not node.inputs:
            raise MXNetModelError(f"{path}: layer {node.name} ({node.op}) sits between the input and the first "
                                  f"convolution {nodes[conv].name}; the mapping expects only the input scaling there")
        chain.append(node)
        i = node.inputs[0]
    if nodes[i].name != "data":
        raise MXNetModelError(f"{path}: the first convolution {nodes[conv].name} does not read the input 'data'")
    for node in reversed(chain):
        value = _number(node, "scalar", 0.0, path)
        if node.op == "_div_scalar" and value == 0:
            raise MXNetModelError(f"{path}: layer {node.name} divides the input by 0")
        if node.op == "_minus_scalar":
            shift -= value
        elif node.op == "_plus_scalar":
            shift += value
        elif node.op == "_mul_scalar":
            scale, shift = scale * value, shift * value
        elif node.op == "_div_scalar":
            scale, shift = scale / value, shift / value
    # this package feeds (x - 127.5) / 127.5; the graph wants scale * x + shift for x in [0, 255]
    if abs(scale * 127.5 + shift) > 1e-6 * max(1.0, abs(shift)):
        raise MXNetModelError(
            f"{path}: the graph scales its input as {scale:g} * x + {shift:g} (x = RGB in [0, 255]); only an input "
            f"centred on 127.5, such as insightface's (x - 127.5) * 0.0078125, can be folded into the first "
            f"convolution")
    return scale * 127.5


def mxnet_state_dict(params_path: str, symbol_path: str | None = None) -> tuple[dict[str, Tensor], str | None]:
    """The insightface-layout backbone state_dict of an MXNet zoo model, and the registered backbone it fits (None
    for an IResNet or MobileFaceNet of a depth or width no registered backbone has).

    ``symbol_path``: the ``model-symbol.json``; None finds it beside ``params_path``.
    """
    symbol_path = symbol_path or symbol_path_for(params_path)
    nodes = _read_symbol(symbol_path)
    names = {n.name: i for i, n in enumerate(nodes)}
    arch = next((a for a in _ARCHITECTURES if all(m in names for m in a.marker)), None)
    if arch is None:
        known = " and ".join(f"{a.name} (layers such as {a.marker[0]})" for a in _ARCHITECTURES)
        raise MXNetModelError(
            f"{symbol_path}: a symbol the mapping does not know: it reads insightface's {known}, each ending in the "
            f"embedding fc1; this graph's first layers are {', '.join(n.name for n in nodes[:6])}")
    params = read_mxnet_params(params_path)
    by_name = {k.split(":", 1)[1] if k.startswith(("arg:", "aux:")) else k: v for k, v in params.items()}

    def param(node: _Node, slot: int, what: str) -> np.ndarray:
        if slot >= len(node.inputs):
            raise MXNetModelError(f"{symbol_path}: layer {node.name} ({node.op}) has no {what} input")
        var = nodes[node.inputs[slot]].name
        if var not in by_name:
            raise MXNetModelError(f"{params_path}: no array {var} ({what} of layer {node.name}); the parameter file "
                                  f"does not belong to {os.path.basename(symbol_path)}")
        return by_name[var]

    state: dict[str, Tensor] = {}
    convs: dict[str, _Node] = {}
    first_conv = None
    for i in _subgraph(nodes, names["fc1"]):
        node = nodes[i]
        if node.op not in _KNOWN_OPS:
            hint = " (this package's backbones use PReLU)" if node.op == "Activation" else ""
            raise MXNetModelError(f"{symbol_path}: layer {node.name} is a {node.op}, which the {arch.name} mapping "
                                  f"does not know{hint}")
        if node.op == "LeakyReLU" and node.attrs.get("act_type", "leaky") != "prelu":
            raise MXNetModelError(f"{symbol_path}: layer {node.name} is a {node.attrs.get('act_type', 'leaky')} "
                                  f"activation; this package's backbones use PReLU")
        if node.op not in ("Convolution", "BatchNorm", "LeakyReLU", "FullyConnected"):
            continue
        path = arch.path(node.name)
        if path is None:
            raise MXNetModelError(f"{symbol_path}: layer {node.name} ({node.op}) has a name the {arch.name} mapping "
                                  f"does not know")
        if node.op == "Convolution":
            if not _flag(node, "no_bias", False):
                raise MXNetModelError(f"{symbol_path}: convolution {node.name} has a bias; the backbone's has none")
            state[f"{path}.weight"] = torch.from_numpy(param(node, 1, "weight").astype(np.float32))
            convs[path] = node
            if path == arch.first_conv:
                first_conv = i
        elif node.op == "BatchNorm":
            eps = _number(node, "eps", MXNET_BN_EPS, symbol_path)
            gamma = param(node, 1, "gamma")
            if _flag(node, "fix_gamma", MXNET_FIX_GAMMA):
                gamma = np.ones_like(gamma)
            state[f"{path}.weight"] = torch.from_numpy(gamma.astype(np.float32))
            state[f"{path}.bias"] = torch.from_numpy(param(node, 2, "beta").astype(np.float32))
            state[f"{path}.running_mean"] = torch.from_numpy(param(node, 3, "moving_mean").astype(np.float32))
            var = param(node, 4, "moving_var").astype(np.float64) + (eps - TORCH_BN_EPS)
            state[f"{path}.running_var"] = torch.from_numpy(var.astype(np.float32))
            state[f"{path}.num_batches_tracked"] = torch.tensor(0, dtype=torch.long)
        elif node.op == "LeakyReLU":
            state[f"{path}.weight"] = torch.from_numpy(param(node, 1, "gamma").astype(np.float32).reshape(-1))
        else:
            state[f"{path}.weight"] = torch.from_numpy(param(node, 1, "weight").astype(np.float32))
            if not _flag(node, "no_bias", False):
                state[f"{path}.bias"] = torch.from_numpy(param(node, 2, "bias").astype(np.float32))
    if first_conv is None:
        raise MXNetModelError(f"{symbol_path}: no first convolution ({arch.name}) feeds fc1")
    first = f"{arch.first_conv}.weight"
    state[first] = state[first] * _input_scale(nodes, first_conv, symbol_path)
    fc_bias = f"{arch.path('pre_fc1')}.bias"
    if arch.fc_bias_into is not None and fc_bias in state:
        # BN(Wx + b) with running mean mu equals BN(Wx) with running mean mu - b
        mean = f"{arch.fc_bias_into}.running_mean"
        state[mean] = state[mean] - state.pop(fc_bias)
    name = _check_geometry(state, convs, symbol_path, arch)
    return state, name


def _check_geometry(state: dict[str, Tensor], convs: dict[str, _Node], path: str, arch: _Architecture) -> str | None:
    """The registered backbone the tensors fit (None: an IResNet or MobileFaceNet of another depth or width, which
    the caller names), after checking every convolution's geometry against that model."""
    import timm

    from .iresnet import IResNet
    from .mobilefacenet import MobileFaceNet

    layout = layout_of(state)
    name = match_backbone(layout)
    size = layout.embedding_size or 512
    with torch.device("meta"):
        if name is not None:
            model = timm.create_model(name, embedding_size=size)
        elif layout.family == "iresnet" and len(layout.blocks) == 4 and all(layout.widths):
            model = IResNet(layers=layout.blocks, channels=layout.widths, embedding_size=size)
        elif layout.family == "mobilefacenet" and layout.widths[0] and layout.widths[0] % 64 == 0:
            model = MobileFaceNet(blocks=layout.blocks, scale=layout.widths[0] // 64, embedding_size=size)
        else:
            raise MXNetModelError(f"{path}: an {arch.name} graph whose tensors give {layout}, which is neither an "
                                  f"IResNet nor a MobileFaceNet of this package")
    name_or_layout = name or str(layout)
    for module_path, node in convs.items():
        try:
            module = model.get_submodule(module_path)
        except AttributeError:
            module = None
        if not isinstance(module, nn.Conv2d):
            raise MXNetModelError(f"{path}: layer {node.name} maps to {module_path}, which is not a convolution in "
                                  f"{name_or_layout}")
        kernel = _tuple(node, "kernel", (), path)
        got = (kernel, _tuple(node, "stride", (1,) * len(kernel), path), _tuple(node, "pad", (0,) * len(kernel), path),
               _number(node, "num_group", 1, path), _tuple(node, "dilate", (1,) * len(kernel), path))
        want = (module.kernel_size, module.stride, module.padding, module.groups, module.dilation)
        if got != want:
            raise MXNetModelError(
                f"{path}: convolution {node.name} has kernel, stride, pad, groups, dilation {got}, but "
                f"{name_or_layout}'s {module_path} has {want}")
    return name
