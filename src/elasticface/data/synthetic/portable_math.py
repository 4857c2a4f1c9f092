"""exp, log, sin, cos and pow with one answer on every machine, for the synthetic renderer.

numpy sends its transcendental ufuncs (``np.exp``, ``np.sin``, ``np.power``, ...) to SIMD kernels
chosen at run time (AVX2, AVX-512, NEON) whose last bits differ, and ``math.exp``/``math.sin`` come
from the platform's libm. A last-bit difference in a colour or an angle is enough to flip a uint8
pixel, so the renderer computes every such function here, from operations IEEE 754 specifies exactly:
``+ - * /`` (each a separate numpy ufunc or Python operation, so never contracted into an FMA),
``floor``/``rint``, ``frexp``/``ldexp`` and comparisons. Evaluation order is fixed by the code below.

Accuracy: about 1e-15 relative for the scalar (Python float) functions, 1e-13 for the array sin and
cos, about 1e-8 for the array log, exp and pow (ample for 8-bit pixels, and fewer operations: numpy's
cost here is per operation); what matters is that the answer is the same everywhere.
"""

from __future__ import annotations

import math

import numpy as np

# ln 2 and pi/2 split so that k * HI is exact for the |k| we meet (Cody-Waite reduction).
_LN2_HI = 6.93147180369123816490e-01  # 32 significant bits
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_PIO2_HI = 1.57079632673412561417e00  # 33 significant bits
_PIO2_LO = 6.07710050650619224932e-11
_TWO_OVER_PI = 6.36619772367581382433e-01

# 1/k! for the Taylor series of exp, sin and cos
_INV_FACT = [1.0 / math.factorial(k) for k in range(18)]  # factorial is integer: exact, then one division


def _exp_poly(r: float) -> float:
    """e^r for |r| <= ln(2)/2 by Taylor's series to degree 13 (truncation below 1e-17)."""
    p = _INV_FACT[13]
    for k in range(12, -1, -1):
        p = p * r + _INV_FACT[k]
    return p


def exp(x: float) -> float:
    """e^x for a Python float (|x| < 700)."""
    x = float(x)
    k = math.floor(x * _INV_LN2 + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    return math.ldexp(_exp_poly(r), k)


def _sin_poly(r: float) -> float:
    """sin r for |r| <= pi/4: r - r^3/3! + r^5/5! - ... - r^15/15!, by Horner in r^2."""
    r2 = r * r
    p = -_INV_FACT[15]
    for k, sign in ((13, 1.0), (11, -1.0), (9, 1.0), (7, -1.0), (5, 1.0), (3, -1.0)):
        p = p * r2 + sign * _INV_FACT[k]
    return r + r * r2 * p


def _cos_poly(r: float) -> float:
    """cos r for |r| <= pi/4: 1 - r^2/2! + ... + r^16/16!."""
    r2 = r * r
    p = _INV_FACT[16]
    for k, sign in ((14, -1.0), (12, 1.0), (10, -1.0), (8, 1.0), (6, -1.0), (4, 1.0), (2, -1.0)):
        p = p * r2 + sign * _INV_FACT[k]
    return 1.0 + r2 * p


def sincos(x: float) -> tuple[float, float]:
    """(sin x, cos x) for a Python float (|x| < 1e4)."""
    x = float(x)
    k = math.floor(x * _TWO_OVER_PI + 0.5)
    r = (x - k * _PIO2_HI) - k * _PIO2_LO
    s, c = _sin_poly(r), _cos_poly(r)
    q = k % 4
    if q == 0:
        return s, c
    if q == 1:
        return c, -s
    if q == 2:
        return -s, -c
    return -c, s


def sin(x: float) -> float:
    return sincos(x)[0]


def cos(x: float) -> float:
    return sincos(x)[1]


# -- arrays (float64 inside; callers cast) ------------------------------------------------------------


_SIGN_SIN = np.array([1.0, 1.0, -1.0, -1.0])
_SIGN_COS = np.array([1.0, -1.0, -1.0, 1.0])


def sincos_array(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sin x, cos x) elementwise, float64, for |x| < 1e4."""
    x = np.asarray(x, dtype=np.float64)
    k = np.floor(x * _TWO_OVER_PI + 0.5)
    r = (x - k * _PIO2_HI) - k * _PIO2_LO
    r2 = r * r
    ps = _INV_FACT[13]
    for j, sign in ((11, -1.0), (9, 1.0), (7, -1.0), (5, 1.0), (3, -1.0)):
        ps = ps * r2 + sign * _INV_FACT[j]
    s = r + r * r2 * ps
    pc = _INV_FACT[14]
    for j, sign in ((12, 1.0), (10, -1.0), (8, 1.0), (6, -1.0), (4, 1.0), (2, -1.0)):
        pc = pc * r2 + sign * _INV_FACT[j]
    c = 1.0 + r2 * pc
    q = k.astype(np.int64) & 3
    swap = (q & 1) == 1
    sin_x = np.where(swap, c, s)
    cos_x = np.where(swap, s, c)
    sin_x *= _SIGN_SIN[q]  # quadrant signs: multiplying by +-1 is exact
    cos_x *= _SIGN_COS[q]
    return sin_x, cos_x


def log_array(x: np.ndarray) -> np.ndarray:
    """Natural log elementwise, float64, for x > 0 (about 3e-8 absolute)."""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))  # x = m * 2^e, m in [0.5, 1): exact
    small = m < 0.7071067811865476
    m = np.where(small, m + m, m)  # exact
    e = np.where(small, e - 1, e).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)  # |s| <= 0.1716: log m = 2 atanh s = 2 (s + s^3/3 + s^5/5 + ...)
    s2 = s * s
    p = s2 * (1.0 / 7.0) + (1.0 / 5.0)
    p = p * s2 + (1.0 / 3.0)
    p = p * s2 + 1.0
    return (e * _LN2_HI + (s + s) * p) + e * _LN2_LO


def exp_array(x: np.ndarray) -> np.ndarray:
    """e^x elementwise, float64, for -700 < x < 700 (about 1e-8 relative)."""
    x = np.asarray(x, dtype=np.float64)
    k = np.floor(x * _INV_LN2 + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO  # |r| <= 0.347
    p = r * _INV_FACT[7] + _INV_FACT[6]
    for j in range(5, -1, -1):
        p = p * r + _INV_FACT[j]
    return np.ldexp(p, k.astype(np.int32))


def pow_array(x: np.ndarray, y: float) -> np.ndarray:
    """x^y elementwise, float64, for x >= 0 and y > 0 (0^y = 0)."""
    x = np.asarray(x, dtype=np.float64)
    pos = x > 1e-300
    out = exp_array(np.maximum(log_array(np.where(pos, x, 1.0)) * float(y), -700.0))
    return np.where(pos, out, 0.0)


# -- table lookups: fewer numpy operations where 8-bit pixels do not need full precision ---------------

_TABLE_BITS = 12
_TABLE_SIN, _TABLE_COS = sincos_array(np.arange((1 << _TABLE_BITS) + 1) * (2.0 * math.pi / (1 << _TABLE_BITS)))
_TABLE_DSIN, _TABLE_DCOS = np.diff(_TABLE_SIN), np.diff(_TABLE_COS)  # diff: one subtraction per entry


def sincos_lerp(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sin x, cos x) elementwise, float64, by linear interpolation in a 4,096-step table of one period
    (error below 3e-7): a third of :func:`sincos_array`'s operations."""
    t = np.asarray(x, dtype=np.float64) * ((1 << _TABLE_BITS) / (2.0 * math.pi))
    i = np.floor(t)
    f = t - i
    j = i.astype(np.int64) & ((1 << _TABLE_BITS) - 1)
    return _TABLE_SIN[j] + f * _TABLE_DSIN[j], _TABLE_COS[j] + f * _TABLE_DCOS[j]
