"""The renderer's portable exp/log/sin/cos/pow agree with libm and numpy within their stated accuracy.

The oracle is the platform's own functions (`math`, numpy): their last bits differ between machines,
which is why the renderer does not use them, but they are accurate to about one ulp, far tighter than
the tolerances below (each is the function's documented accuracy with a margin).
"""

from __future__ import annotations

import math

import numpy as np

from elasticface.data.synthetic import portable_math as pm
from elasticface.data.synthetic.render import blur, gaussian_weights, superellipse_r


def test_scalar_functions_match_libm():
    xs = np.random.default_rng(0).uniform(-40.0, 40.0, 2000).tolist() + [0.0, math.pi / 4, -math.pi, 2 * math.pi]
    for x in xs:
        assert abs(pm.sin(x) - math.sin(x)) < 1e-15 and abs(pm.cos(x) - math.cos(x)) < 1e-15, x
        if abs(x) < 30:
            assert abs(pm.exp(x) / math.exp(x) - 1.0) < 1e-15, x
    assert pm.exp(0.0) == 1.0 and pm.sincos(0.0) == (0.0, 1.0)


def test_array_functions_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.uniform(-60.0, 60.0, 20000)
    s, c = pm.sincos_array(x)
    assert np.abs(s - np.sin(x)).max() < 1e-12 and np.abs(c - np.cos(x)).max() < 1e-12
    s, c = pm.sincos_lerp(x)
    assert np.abs(s - np.sin(x)).max() < 5e-7 and np.abs(c - np.cos(x)).max() < 5e-7  # (2 pi / 4096)^2 / 8
    e = rng.uniform(-30.0, 30.0, 20000)
    assert np.abs(pm.exp_array(e) / np.exp(e) - 1.0).max() < 1e-7
    p = rng.uniform(1e-8, 10.0, 20000)
    assert np.abs(pm.log_array(p) - np.log(p)).max() < 1e-7
    assert np.abs(pm.pow_array(p, 2.7) / p**2.7 - 1.0).max() < 1e-6
    assert np.array_equal(pm.pow_array(np.array([0.0, 1.0]), 1.5), [0.0, 1.0])


def test_superellipse_and_blur_match_their_definitions():
    rng = np.random.default_rng(2)
    x, y = (rng.uniform(0.0, 1.5, 5000).astype(np.float32) for _ in range(2))
    for power in (1.5, 2.0, 3.2, 5.0):
        want = (x.astype(np.float64) ** power + y.astype(np.float64) ** power) ** (1.0 / power)
        assert (np.abs(superellipse_r(x, y, power) - want) / np.maximum(want, 1e-9)).max() < 2e-5, (
            power
        )  # stated: 1e-5
    for sigma in (0.3, 0.7, 1.5):
        w = gaussian_weights(sigma).astype(np.float64)
        assert len(w) == math.ceil(3 * sigma) + 1 and abs(w[0] + 2 * w[1:].sum() - 1.0) < 1e-6
        assert np.allclose(w / w[0], np.exp(-(np.arange(len(w)) ** 2) / (2 * sigma**2)), rtol=1e-6)
    img = np.zeros((3, 112, 112), dtype=np.float32)
    img[:, 50, 60] = 1.0
    out = blur(img, 1.0)
    w = gaussian_weights(1.0)
    assert np.allclose(out[0, 47:54, 57:64], np.outer(w[[3, 2, 1, 0, 1, 2, 3]], w[[3, 2, 1, 0, 1, 2, 3]]), atol=1e-7)
    assert blur(img, 0.2) is img  # below 0.3 px: no blur
    flat = np.full((3, 112, 112), 0.25, dtype=np.float32)
    assert np.allclose(blur(flat, 1.5), 0.25, atol=1e-6)  # edges extended: a flat image stays flat


# What decides a synthetic pixel must have one answer on every machine (docs/portability.md): a static
# check that catches a forbidden call even on a machine whose kernels happen to agree.
_FORBIDDEN = {
    "np": {
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "sin",
        "cos",
        "tan",
        "arcsin",
        "arccos",
        "arctan",
        "arctan2",
        "sinh",
        "cosh",
        "tanh",
        "power",
        "float_power",
        "hypot",
        "sum",
        "mean",
        "dot",
        "matmul",
        "einsum",
        "convolve",
        "cumsum",
        "std",
        "var",
        "linalg",
        "fft",
    },
    "math": {
        "exp",
        "expm1",
        "log",
        "log1p",
        "log2",
        "log10",
        "sin",
        "cos",
        "tan",
        "atan",
        "atan2",
        "asin",
        "acos",
        "pow",
        "hypot",
        "sinh",
        "cosh",
        "tanh",
        "erf",
        "fsum",
    },
}


def test_renderer_uses_no_machine_dependent_operation():
    import ast
    from pathlib import Path

    import elasticface.data.synthetic as synthetic

    folder = Path(synthetic.__file__).parent
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name == "portable_math.py":  # the one home of exp/log/sin/cos/pow, built from + - * /
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.attr in _FORBIDDEN.get(node.value.id, ()):
                    found.append(f"{where} {node.value.id}.{node.attr}")
                if node.value.id == "torch" and node.attr not in {"Tensor", "from_numpy", "utils"}:
                    found.append(f"{where} torch.{node.attr}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                found += [f"{where} import {n}" for n in names if n.split(".")[0] in {"PIL", "scipy", "cv2"}]
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                found.append(f"{where} @")
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                exponent = node.right
                if not (isinstance(exponent, ast.Constant) and isinstance(exponent.value, int)):
                    found.append(f"{where} ** with a non-integer exponent")
    assert not found, found
