"""Write the MXNet golden files the zoo-import tests read (run with MXNet, in its own environment).

    python3.11 -m venv /tmp/mxenv && /tmp/mxenv/bin/pip install mxnet==1.9.1 numpy==1.23.5
    /tmp/mxenv/bin/python tests/data/mxnet/make_golden.py

Builds two graphs with insightface's layer names and structure, random weights and statistics, and saves each with
``mx.model.save_checkpoint`` (``<dir>/model-symbol.json`` + ``<dir>/model-0000.params``):

- ``fresnet/``: an LResNet-E-IR graph (insightface's ``fresnet``, version_unit 3, output "E": BN eps 2e-5, PReLU,
  input (x - 127.5) * 0.0078125), narrow (widths 8-32, 16-d) and shallow (units 2, 1, 1, 1) to stay small; float32.
- ``y1/``: the MobileFaceNet "y1" graph (``fmobilefacenet``: blocks 1-4-6-2, 64/128 channels, MXNet's default
  BN eps 1e-3, a 128-d embedding whose Linear has a bias); its arrays are saved as float16 to halve the file (the
  values are float16-exact, so the float32 forward below sees the same numbers).

The embedding BatchNorm ``fc1`` is stored with a random gamma although ``fix_gamma=True`` makes MXNet use 1: a
reader that loads the stored value fails. ``golden.npz`` holds four RGB uint8 inputs (random noise and smooth
gradients) and each graph's ``fc1`` output computed by MXNet on them.

``arrays_v2.params`` and ``arrays_v3.params`` hold a few small arrays of every dtype a face model may use, saved
by ``mx.nd.save`` as it does by default (v2) and under numpy shape semantics (v3, where a 0-d array is a scalar);
``arrays.npz`` holds the same arrays for the reader's test.
"""

from __future__ import annotations

import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sym = mx.sym


def conv(x, name, filters, kernel=(1, 1), stride=(1, 1), pad=(0, 0), groups=1):
    return sym.Convolution(x, num_filter=filters, kernel=kernel, stride=stride, pad=pad, num_group=groups,
                           no_bias=True, name=name)


def prelu(x, name):
    return sym.LeakyReLU(x, act_type="prelu", name=name)


def embedding(x, size, weight=None):
    """Dropout (fresnet) -> FullyConnected 'pre_fc1' -> BatchNorm 'fc1' with fixed gamma."""
    kwargs = {"weight": weight} if weight is not None else {}
    x = sym.FullyConnected(x, num_hidden=size, name="pre_fc1", **kwargs)
    return sym.BatchNorm(x, fix_gamma=True, eps=2e-5, momentum=0.9, name="fc1")


def fresnet(units=(2, 1, 1, 1), widths=(8, 8, 16, 16, 32), size=16):
    def bn(x, name):
        return sym.BatchNorm(x, fix_gamma=False, eps=2e-5, momentum=0.9, name=name)

    x = sym.identity(sym.Variable("data"), name="id")
    x = (x - 127.5) * 0.0078125
    x = prelu(bn(conv(x, "conv0", widths[0], (3, 3), (1, 1), (1, 1)), "bn0"), "relu0")
    for stage, count in enumerate(units):
        width = widths[stage + 1]
        for unit in range(count):
            name = f"stage{stage + 1}_unit{unit + 1}"
            stride = (2, 2) if unit == 0 else (1, 1)
            body = conv(bn(x, name + "_bn1"), name + "_conv1", width, (3, 3), (1, 1), (1, 1))
            body = prelu(bn(body, name + "_bn2"), name + "_relu1")
            body = bn(conv(body, name + "_conv2", width, (3, 3), stride, (1, 1)), name + "_bn3")
            shortcut = bn(conv(x, name + "_conv1sc", width, (1, 1), stride), name + "_sc") if unit == 0 else x
            x = body + shortcut
    x = sym.Dropout(bn(x, "bn1"), p=0.4)
    return embedding(x, size)


def y1(blocks=(1, 4, 6, 2), size=128):
    def unit(x, name, filters, kernel=(1, 1), stride=(1, 1), pad=(0, 0), groups=1, act=True):
        x = conv(x, name + "_conv2d", filters, kernel, stride, pad, groups)
        x = sym.BatchNorm(x, fix_gamma=False, momentum=0.9, name=name + "_batchnorm")  # MXNet's default eps 1e-3
        return prelu(x, name + "_relu") if act else x

    def bottleneck(x, name, out, hidden, stride):
        x = unit(x, name + "_conv_sep", hidden)
        x = unit(x, name + "_conv_dw", hidden, (3, 3), stride, (1, 1), hidden)
        return unit(x, name + "_conv_proj", out, act=False)

    def residual(x, name, count, out, hidden):
        for i in range(count):
            x = bottleneck(x, f"{name}_block{i}", out, hidden, (1, 1)) + x
        return x

    x = (sym.Variable("data") - 127.5) * 0.0078125
    x = unit(x, "conv_1", 64, (3, 3), (2, 2), (1, 1))
    x = unit(x, "conv_2_dw", 64, (3, 3), (1, 1), (1, 1), 64)
    x = residual(bottleneck(x, "dconv_23", 64, 128, (2, 2)), "res_3", blocks[1], 64, 128)
    x = residual(bottleneck(x, "dconv_34", 128, 256, (2, 2)), "res_4", blocks[2], 128, 256)
    x = residual(bottleneck(x, "dconv_45", 128, 512, (2, 2)), "res_5", blocks[3], 128, 256)
    x = unit(x, "conv_6sep", 512)
    x = unit(x, "conv_6dw7_7", 512, (7, 7), groups=512, act=False)
    return embedding(x, size, weight=sym.Variable("fc1_weight"))


def random_params(net, rng, dtype):
    arg_shapes, _, aux_shapes = net.infer_shape(data=(1, 3, 112, 112))
    args, auxs = {}, {}
    for name, shape in zip(net.list_arguments(), arg_shapes):
        if name == "data":
            continue
        if name.endswith("_gamma") and len(shape) == 1 and "relu" not in name:
            value = rng.uniform(0.5, 1.5, shape)           # BatchNorm scale (fc1's is ignored by MXNet)
        elif name.endswith("_gamma"):
            value = rng.uniform(0.0, 0.4, shape)           # PReLU slope
        elif name.endswith(("_beta", "_bias")):
            value = rng.normal(0.0, 0.1, shape)
        else:                                              # conv / fc weights, He-scaled
            value = rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
        args[name] = value
    for name, shape in zip(net.list_auxiliary_states(), aux_shapes):
        auxs[name] = rng.normal(0.0, 0.1, shape) if name.endswith("_mean") else rng.uniform(0.5, 2.0, shape)
    cast = {k: v.astype(dtype).astype(np.float32) for k, v in {**args, **auxs}.items()}  # dtype-exact values
    return ({k: cast[k] for k in args}, {k: cast[k] for k in auxs})


def forward(net, args, auxs, images):
    module = mx.mod.Module(net, data_names=["data"], label_names=None, context=mx.cpu())
    module.bind(data_shapes=[("data", images.shape)], for_training=False)
    module.set_params({k: mx.nd.array(v) for k, v in args.items()}, {k: mx.nd.array(v) for k, v in auxs.items()})
    module.forward(mx.io.DataBatch([mx.nd.array(images.astype(np.float32))]), is_train=False)
    return module.get_outputs()[0].asnumpy()


def inputs(rng):
    noise = rng.randint(0, 256, (2, 3, 112, 112))
    ramp = np.linspace(0, 255, 112)
    smooth = np.stack([np.stack([ramp[None, :].repeat(112, 0), ramp[:, None].repeat(112, 1),
                                 255 - ramp[None, :].repeat(112, 0)]),
                       np.stack([np.full((112, 112), 200.0), ramp[:, None].repeat(112, 1), np.full((112, 112), 30.0)])])
    return np.concatenate([noise, smooth]).round().astype(np.uint8)


def main():
    rng = np.random.RandomState(29)
    images = inputs(rng)
    golden = {"images": images}
    for name, net, dtype in (("fresnet", fresnet(), np.float32), ("y1", y1(), np.float16)):
        args, auxs = random_params(net, rng, dtype)
        golden[name] = forward(net, args, auxs, images)
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        mx.model.save_checkpoint(os.path.join(HERE, name, "model"), 0, net,
                                 {k: mx.nd.array(v, dtype=dtype) for k, v in args.items()},
                                 {k: mx.nd.array(v, dtype=dtype) for k, v in auxs.items()})
        print(name, golden[name].shape, "norms", np.linalg.norm(golden[name], axis=1).round(2))
    np.savez(os.path.join(HERE, "golden.npz"), **golden)
    write_dtype_files(rng)


def write_dtype_files(rng):
    arrays = {f"{dtype}_{i}": rng.normal(0, 100, shape).astype(dtype)
              for i, shape in enumerate([(2, 3), (4,), (1, 2, 1, 2)])
              for dtype in ("float32", "float64", "float16", "uint8", "int32", "int8", "int64")}
    mx.nd.save(os.path.join(HERE, "arrays_v2.params"), {k: mx.nd.array(v, dtype=v.dtype) for k, v in arrays.items()})
    scalars = {"scalar": np.array(3.5, dtype=np.float32), "empty": np.zeros((0, 3), dtype=np.float32),
               "matrix": arrays["float32_0"]}
    with mx.util.np_shape(True):
        mx.nd.save(os.path.join(HERE, "arrays_v3.params"),
                   {k: mx.nd.array(v, dtype=v.dtype) for k, v in scalars.items()})
    np.savez(os.path.join(HERE, "arrays.npz"), **arrays, **{f"v3_{k}": v for k, v in scalars.items()})


if __name__ == "__main__":
    main()
