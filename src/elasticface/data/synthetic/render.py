"""Drawing one synthetic face from its identity and nuisance parameters (see ``params.py``).

Rendering is vectorised numpy at 112x112 directly: every part is a soft-edged mask evaluated on the
pixels of its bounding box in the face's canonical coordinates (the image pixel grid mapped through the
inverse pose transform), then alpha-blended onto a channel-first float canvas. :func:`render_face_chw`
calls one function per part, back to front, then applies lighting, blur and noise. The shared shape and
filter primitives are public, each checked against its definition: :func:`superellipse_r`,
:func:`gaussian_weights` and :func:`blur`.

The same bytes on every machine (docs/portability.md): nothing here may depend on
which SIMD kernels numpy, torch or Pillow pick, nor on the platform's libm. So in this package
(render.py, params.py) only exactly specified operations decide a pixel: ``+ - * /`` and ``sqrt``
(numpy ufuncs or Python floats, one operation at a time), comparisons, ``abs``/``minimum``/``maximum``/
``where``/``clip``, ``floor``/``ceil``, integer arithmetic, casts, and numpy's seeded ``Generator``
draws; exp, log, sin, cos and pow come from :mod:`portable_math`. Forbidden: numpy's transcendental
ufuncs (``np.exp``, ``np.sin``, ``np.power`` or ``**`` with a non-integer exponent, ...), ``math.exp``/
``math.sin``/..., reductions whose summation order is up to the library (``np.sum``, ``np.dot``,
``@``/BLAS, ``np.mean``), torch ops and Pillow filters. tests/test_synthetic.py renders under several
numpy and torch kernel choices and asserts one checksum.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from elasticface.data.synthetic.portable_math import exp, pow_array, sincos, sincos_array, sincos_lerp

IMAGE_SIZE = 112

_N = IMAGE_SIZE
_GRID = ((np.arange(_N, dtype=np.float32) + 0.5) * (2.0 / _N) - 1.0).astype(np.float32)
_GX = np.broadcast_to(_GRID[None, :], (_N, _N))
_GY = np.broadcast_to(_GRID[:, None], (_N, _N))
_GRID64 = _GRID.astype(np.float64)
f32 = np.float32

Window = tuple[slice, slice]


class _Canvas:
    """Float RGB image plus the canonical coordinates of each pixel under the pose transform."""

    def __init__(self, tx: float, ty: float, scale: float, rot: float) -> None:
        self.tx, self.ty, self.s = tx, ty, scale
        self.sn, self.c = sincos(rot)
        dx = _GX - np.float32(tx)
        dy = _GY - np.float32(ty)
        inv = np.float32(1.0 / scale)
        c, sn = np.float32(self.c), np.float32(self.sn)
        self.U = (c * dx + sn * dy) * inv
        self.V = (-sn * dx + c * dy) * inv
        self.px = (2.0 / _N) / scale  # one pixel in canonical units
        # channel-first: numpy broadcasting over a trailing axis of 3 is several times slower
        self.img = np.empty((3, _N, _N), dtype=np.float32)

    def window(self, cx: float, cy: float, hx: float, hy: float | None = None) -> Window | None:
        """Pixel slices covering the canonical box centre (cx, cy), half-extents (hx, hy); None when off-image."""
        hy = hx if hy is None else hy
        x = self.tx + self.s * (self.c * cx - self.sn * cy)
        y = self.ty + self.s * (self.sn * cx + self.c * cy)
        ac, asn = abs(self.c), abs(self.sn)
        margin = 3 * (2.0 / _N)
        rx = self.s * (ac * hx + asn * hy) + margin
        ry = self.s * (asn * hx + ac * hy) + margin
        j0 = max(int((x - rx + 1.0) * _N / 2), 0)
        j1 = min(int(math.ceil((x + rx + 1.0) * _N / 2)), _N)
        i0 = max(int((y - ry + 1.0) * _N / 2), 0)
        i1 = min(int(math.ceil((y + ry + 1.0) * _N / 2)), _N)
        if j0 >= j1 or i0 >= i1:
            return None
        return slice(i0, i1), slice(j0, j1)

    def coords(self, win: Window) -> tuple[np.ndarray, np.ndarray]:
        return self.U[win], self.V[win]

    def sin_u(self, win: Window, freq: float) -> np.ndarray:
        """sin(freq * U) on the window. U is affine in the pixel's column j and row i, so
        sin(a_j + b_i) = sin a_j cos b_i + cos a_j sin b_i: two 1-D evaluations and an outer product."""
        k = freq / self.s
        cols, rows = _GRID64[win[1]], _GRID64[win[0]]
        s, c = (
            t.astype(np.float32)
            for t in sincos_lerp(np.concatenate([k * self.c * (cols - self.tx), k * self.sn * (rows - self.ty)]))
        )
        n = len(cols)
        out = s[None, :n] * c[n:, None]
        out += c[None, :n] * s[n:, None]
        return out

    def blend(self, win: Window, alpha: np.ndarray, colour: np.ndarray) -> None:
        """img = img + alpha * (colour - img) on the window; colour is [3] or [3, h, w]."""
        region = self.img[:, win[0], win[1]]
        colour = np.asarray(colour, dtype=np.float32)
        if colour.ndim == 1:
            colour = colour[:, None, None]
        region += alpha[None] * (colour - region)


# -- primitives ------------------------------------------------------------------------------------


def _edge(d: np.ndarray, px: float) -> np.ndarray:
    """Soft mask from a signed distance (canonical units, > 0 inside): one-pixel linear ramp."""
    a = d * np.float32(1.0 / px)
    a += np.float32(0.5)
    np.maximum(a, np.float32(0.0), out=a)
    return np.minimum(a, np.float32(1.0), out=a)


def _ellipse_r(
    U: np.ndarray, V: np.ndarray, cx: float, cy: float, rx: float, ry: float, ang: float = 0.0
) -> np.ndarray:
    dx = U - np.float32(cx)
    dy = V - np.float32(cy)
    if ang:
        s, c = (np.float32(t) for t in sincos(ang))
        dx, dy = c * dx + s * dy, -s * dx + c * dy
    dx = dx * np.float32(1.0 / rx)
    dy = dy * np.float32(1.0 / ry)
    return np.sqrt(dx * dx + dy * dy)


_SUPERELLIPSE_STEPS = 512
_SUPERELLIPSE_TABLES: dict[float, tuple[np.ndarray, np.ndarray]] = {}


def superellipse_r(x: np.ndarray, y: np.ndarray, power: float) -> np.ndarray:
    """(x^p + y^p)^(1/p) for x, y >= 0 (float32), as a * g(b / a) with a = max, b = min and
    g(t) = (1 + t^p)^(1/p) on [0, 1] interpolated linearly in a table built once per power
    (relative error below 1e-5, a thousandth of a pixel at the edge): a dozen numpy operations."""
    table = _SUPERELLIPSE_TABLES.get(power)
    if table is None:
        if len(_SUPERELLIPSE_TABLES) > 4096:
            _SUPERELLIPSE_TABLES.clear()
        t = np.arange(_SUPERELLIPSE_STEPS + 2, dtype=np.float64) * (1.0 / _SUPERELLIPSE_STEPS)
        g = pow_array(pow_array(t, power) + 1.0, 1.0 / power).astype(np.float32)
        table = _SUPERELLIPSE_TABLES[power] = (g[:-1], g[1:] - g[:-1])
    g0, dg = table
    a = np.maximum(x, y)
    t = np.minimum(x, y) / np.maximum(a, f32(1e-30))
    t *= f32(_SUPERELLIPSE_STEPS)
    i = np.floor(t)
    t -= i
    j = i.astype(np.int64)
    return a * (g0[j] + t * dg[j])


def _ellipse(
    cv: _Canvas,
    cx: float,
    cy: float,
    rx: float,
    ry: float,
    colour: np.ndarray,
    ang: float = 0.0,
    opacity: float = 1.0,
) -> None:
    win = cv.window(cx, cy, max(rx, ry)) if ang else cv.window(cx, cy, rx, ry)
    if win is None:
        return
    U, V = cv.coords(win)
    r = _ellipse_r(U, V, cx, cy, rx, ry, ang)
    alpha = _edge((1.0 - r) * min(rx, ry), cv.px)
    if opacity != 1.0:
        alpha *= np.float32(opacity)
    cv.blend(win, alpha, colour)


def gaussian_weights(sigma: float) -> np.ndarray:
    """Taps w[0..R] (R = ceil(3 sigma)) of a normalised 1-D Gaussian of standard deviation ``sigma`` px."""
    radius = max(int(math.ceil(3.0 * sigma)), 1)
    w = [exp(-(k * k) / (2.0 * sigma * sigma)) for k in range(radius + 1)]
    total = w[0]
    for t in w[1:]:
        total += 2.0 * t  # fixed order: Python floats, left to right
    return np.array([t / total for t in w], dtype=np.float32)


def blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur (standard deviation ``sigma`` px) of a float [3, 112, 112] image, edges extended.

    Separable, symmetric taps summed in a fixed order with numpy's elementwise ``+``/``*`` (never a
    convolution routine or BLAS, whose summation order is theirs), so every machine gets the same bits.
    """
    if sigma < 0.3:
        return img
    w = gaussian_weights(sigma)
    r = len(w) - 1
    p = np.pad(img, ((0, 0), (r, r), (r, r)), mode="edge")  # the padded rows blur into copies of the edge rows
    h = p[:, :, r : r + _N] * w[0]  # along x, on all padded rows
    for k in range(1, r + 1):
        pair = p[:, :, r - k : r - k + _N] + p[:, :, r + k : r + k + _N]
        pair *= w[k]
        h += pair
    out = h[:, r : r + _N] * w[0]  # then along y
    for k in range(1, r + 1):
        pair = h[:, r - k : r - k + _N] + h[:, r + k : r + k + _N]
        pair *= w[k]
        out += pair
    return out


_NOISE_BANK: np.ndarray | None = None
_NOISE_TERMS = 4  # Irwin-Hall: the sum of 4 uniforms is close to a Gaussian (bounded at 3.46 sd)


def _noise_crop(key: int) -> np.ndarray:
    """Unit-variance noise [3, 112, 112]: a crop of a fixed noise bank picked (offset, flips) by ``key``.

    Much cheaper than drawing fresh noise per image, and just as deterministic. The bank is a sum of
    uniform 16-bit integers, centred and scaled: integer draws and one rounding, exact everywhere
    (a Gaussian generator would take logs in its tail).
    """
    global _NOISE_BANK
    if _NOISE_BANK is None:
        m = 1 << 16
        ints = np.random.default_rng(0x5EED).integers(0, m, size=(_NOISE_TERMS, 3, 2 * _N, 2 * _N), dtype=np.int64)
        total = ints[0]
        for t in ints[1:]:
            total = total + t
        centred = (2 * total - _NOISE_TERMS * (m - 1)).astype(np.float64)  # exact integers
        sd2 = math.sqrt(_NOISE_TERMS * (m * m - 1) / 12.0) * 2.0  # sd of 2 * total; sqrt is exact IEEE
        _NOISE_BANK = (centred / sd2).astype(np.float32)
    oy, ox = key % _N, (key // _N) % _N
    crop = _NOISE_BANK[:, oy : oy + _N, ox : ox + _N]
    flips = (key // (_N * _N)) % 4
    if flips & 1:
        crop = crop[:, ::-1]
    if flips & 2:
        crop = crop[:, :, ::-1]
    return crop


def _to_uint8(img: np.ndarray) -> np.ndarray:
    img = img * np.float32(255.0)
    img += np.float32(0.5)
    np.clip(img, 0.0, 255.0, out=img)
    return img.astype(np.uint8)


# -- face parts, back to front ---------------------------------------------------------------------


def _skin(p: dict[str, Any]) -> np.ndarray:
    return p["skin"].astype(np.float32)


def _hair(p: dict[str, Any]) -> np.ndarray:
    return p["hair"].astype(np.float32)


def _eye_x(p: dict[str, Any], sgn: float, yaw: float) -> float:
    """Horizontal centre of the left (sgn -1) or right (+1) eye: yaw shifts the inner features."""
    return sgn * p["eye_dx"] * (1.0 - 0.12 * sgn * yaw) + 0.12 * yaw


def _mouth_y(p: dict[str, Any]) -> float:
    return p["face_cy"] + p["eye_y"] + p["nose_len"] + p["mouth_gap"]


def _background(cv: _Canvas, v: dict[str, Any]) -> None:
    """Two-colour gradient plus low-frequency waves, in image coordinates (it does not move with the head)."""
    img = cv.img
    sin_dir, cos_dir = sincos(v["bg_dir"])
    t = (f32(0.5 * cos_dir) * _GRID + f32(0.5))[None, :] + (f32(0.5 * sin_dir) * _GRID)[:, None]
    np.multiply(t[None], (v["bg2"] - v["bg"]).astype(np.float32)[:, None, None], out=img)
    img += v["bg"].astype(np.float32)[:, None, None]
    freq, ph, ang, amp = v["bg_waves"].T  # one wave per channel: amp * sin(fx x + fy y + ph)
    if amp.any():
        sin_ang, cos_ang = sincos_array(ang)
        # sin(a_x + b_y) = sin a cos b + cos a sin b: 1-D factors, then outer products (separable)
        arg = np.concatenate([(freq * cos_ang)[:, None] * _GRID64 + ph[:, None], (freq * sin_ang)[:, None] * _GRID64])
        s, c = (t.astype(np.float32) for t in sincos_lerp(arg))
        a32 = amp.astype(np.float32)[:, None]
        img += (s[:3] * a32)[:, None, :] * c[3:, :, None]
        img += (c[:3] * a32)[:, None, :] * s[3:, :, None]


def _clothing_and_neck(cv: _Canvas, p: dict[str, Any], v: dict[str, Any]) -> None:
    fcy, fw = p["face_cy"], p["face_w"]
    _ellipse(cv, 0.0, fcy + v["cloth_h"], 1.05, 0.55, v["cloth"])
    neck_w = 0.55 * fw
    win = cv.window(0.0, fcy + 0.75, neck_w + 0.05, 0.45)
    if win is not None:
        U, V = cv.coords(win)
        a = _edge(f32(neck_w) - np.abs(U - f32(0.03 * v["yaw"])), cv.px) * _edge(V - f32(fcy + 0.3), cv.px)
        cv.blend(win, a, _skin(p) * 0.78)


def _hair_behind(cv: _Canvas, p: dict[str, Any]) -> None:
    """Hair behind the head: the head ellipse enlarged, falling straight down to ``hair_length``."""
    if p["bald"]:
        return
    fcy, hv = p["face_cy"], p["hair_volume"]
    rx, ry = p["face_w"] + hv, p["face_h_top"] + hv
    y0, y1 = fcy - ry, max(fcy + p["hair_length"], fcy - ry + 0.05)
    win = cv.window(0.0, (y0 + y1) / 2, rx, (y1 - y0) / 2)
    if win is None:
        return
    U, V = cv.coords(win)
    r_up = _ellipse_r(U, V, 0.0, fcy, rx, ry)
    side = np.where(V > f32(fcy), np.abs(U) * f32(1.0 / rx), r_up)
    a = _edge((1.0 - side) * min(rx, ry), cv.px) * _edge(f32(fcy + p["hair_length"]) - V, cv.px)
    cv.blend(win, a, _hair(p) * 0.85)


def _ears(cv: _Canvas, p: dict[str, Any], yaw: float) -> None:
    fw = p["face_w"]
    for sgn in (-1.0, 1.0):
        ex = sgn * fw * (1.0 - 0.04 * sgn * yaw) - 0.02 * yaw
        _ellipse(cv, ex, p["face_cy"] + p["ear_y"], p["ear_size"] * 0.6, p["ear_size"], _skin(p) * 0.88)


class _FaceMask(NamedTuple):
    win: Window
    V: np.ndarray
    alpha: np.ndarray


def _face(cv: _Canvas, p: dict[str, Any], v: dict[str, Any]) -> _FaceMask:
    """Ellipse on top, superellipse (jaw) below, shaded by side light and towards the rim; returns its mask."""
    fcy, fw, fht, fhb = p["face_cy"], p["face_w"], p["face_h_top"], p["face_h_bot"]
    win = cv.window(0.0, fcy + (fhb - fht) / 2, fw, (fht + fhb) / 2)
    U, V = cv.coords(win)
    dx = np.abs(U) * f32(1.0 / fw)
    dy_t = (V - f32(fcy)) * f32(1.0 / fht)
    dy_b = (V - f32(fcy)) * f32(1.0 / fhb)
    jp = float(f32(p["jaw_power"]))
    r = np.sqrt(dx * dx + dy_t * dy_t)
    below = V >= f32(fcy)
    rows = np.flatnonzero(below.any(axis=1))
    if rows.size:  # the superellipse (x^p + y^p)^(1/p) only on the rows that reach below the centre
        low = slice(int(rows[0]), None)
        r_bot = superellipse_r(dx[low], np.abs(dy_b[low]), jp)
        r[low] = np.where(below[low], r_bot, r[low])
    alpha = _edge((1.0 - r) * min(fw, fht, fhb), cv.px)
    shade = f32(1.0) - f32(0.18) * r * r + f32(v["face_shade"]) * U
    cv.blend(win, alpha, _skin(p)[:, None, None] * shade[None])
    return _FaceMask(win, V, alpha)


def _beard(cv: _Canvas, p: dict[str, Any], face: _FaceMask, yaw: float) -> None:
    """Full beard (on the face mask, below the mouth line) and moustache; drawn before the mouth."""
    mouth_y = _mouth_y(p)
    hair = _hair(p)
    if p["beard"] == 2:
        a = face.alpha * _edge(face.V - f32(mouth_y - 0.08), cv.px) * f32(0.9)
        cv.blend(face.win, a, hair)
    if p["beard"] >= 1:
        _ellipse(cv, 0.0 + 0.1 * yaw, mouth_y - 0.05, p["mouth_w"] * 1.2, 0.035, hair, opacity=0.95)


def _hair_front(cv: _Canvas, p: dict[str, Any]) -> None:
    """Hair over the forehead (inside the enlarged head ellipse, above the hairline), or side tufts when bald."""
    fcy, fw, hv = p["face_cy"], p["face_w"], p["hair_volume"]
    hair = _hair(p)
    if p["bald"]:
        if hv > 0.1:
            for sgn in (-1.0, 1.0):
                _ellipse(cv, sgn * fw * 0.93, fcy - 0.1, 0.08, 0.22, hair, opacity=0.9)
        return
    rx, ry = fw + 0.6 * hv, p["face_h_top"] + hv
    y0, y1 = fcy - ry, min(fcy + p["hairline"] + 0.6, fcy + ry)
    win = cv.window(0.0, (y0 + y1) / 2, rx, (y1 - y0) / 2)
    U, V = cv.coords(win)
    r = _ellipse_r(U, V, 0.0, fcy, rx, ry)
    xs = U * f32(1.0 / fw)
    line = (
        f32(fcy + p["hairline"])
        + f32(0.25 * p["hairline_curve"]) * xs * xs * np.abs(xs)
        + f32(p["hair_part"] * 0.3) * xs
    )
    line = line + f32(p["fringe_wave"]) * cv.sin_u(win, float(f32(p["fringe_freq"])))
    a = _edge((1.0 - r) * min(rx, ry), cv.px) * _edge(line - V, cv.px)
    cv.blend(win, a, hair)


def _eyes(cv: _Canvas, p: dict[str, Any], v: dict[str, Any]) -> None:
    """Lids, white, iris and pupil; yaw narrows the far eye and gaze moves the iris."""
    yaw, px = v["yaw"], cv.px
    ey = p["face_cy"] + p["eye_y"]
    eye_rx = p["eye_rx"]
    eye_ry = eye_rx * p["eye_ry"]
    skin = _skin(p)
    for sgn in (-1.0, 1.0):
        cx = _eye_x(p, sgn, yaw)
        rx = eye_rx * (1.0 - 0.25 * max(0.0, sgn * yaw))
        ry = max(eye_ry * v["eye_open"], 0.008)
        tilt = -sgn * p["eye_tilt"]
        _ellipse(cv, cx, ey, rx * 1.12, ry * 1.3 + 0.008, skin * 0.45, ang=tilt)  # lids / lashes
        win = cv.window(cx, ey, rx)
        if win is None:
            continue
        U, V = cv.coords(win)
        r_eye = _ellipse_r(U, V, cx, ey, rx, ry, tilt)
        inside = _edge((1.0 - r_eye) * min(rx, ry), px)
        cv.blend(win, inside, np.array([0.95, 0.94, 0.9], dtype=np.float32))
        ir = p["iris_r"] * eye_rx
        icx = cx + (v["gaze"] + 0.3 * yaw) * 0.4 * rx
        r_iris = _ellipse_r(U, V, icx, ey, ir, ir)
        cv.blend(win, inside * _edge((1.0 - r_iris) * ir, px), p["iris"])
        pr = 0.45 * ir
        r_pupil = _ellipse_r(U, V, icx, ey, pr, pr)
        cv.blend(win, inside * _edge((1.0 - r_pupil) * pr, px), np.array([0.03, 0.03, 0.03], dtype=np.float32))


def _brows(cv: _Canvas, p: dict[str, Any], v: dict[str, Any]) -> None:
    """Arched, tapering bands above the eyes."""
    yaw, px = v["yaw"], cv.px
    ey = p["face_cy"] + p["eye_y"]
    eye_ry = p["eye_rx"] * p["eye_ry"]
    brow_col = _hair(p) * (1.0 - p["brow_dark"]) + _skin(p) * 0.25 * p["brow_dark"]
    for sgn in (-1.0, 1.0):
        bx = _eye_x(p, sgn, yaw)
        by = ey - eye_ry - p["brow_gap"] - v["brow_raise"]
        L = p["brow_len"] * (1.0 - 0.25 * max(0.0, sgn * yaw))
        win = cv.window(bx, by, L)
        if win is None:
            continue
        U, V = cv.coords(win)
        ang = sgn * p["brow_angle"]
        s, c = (f32(t) for t in sincos(ang))
        ddx, ddy = U - f32(bx), V - f32(by)
        xr = c * ddx + s * ddy
        yr = -s * ddx + c * ddy
        curve = -f32(p["brow_arch"]) * xr * xr
        half_t = f32(p["brow_thick"] * 0.5) * (f32(1.0) - f32(0.5) * np.square(xr * f32(2.0 / L)) * sgn * np.sign(xr))
        a = _edge(half_t - np.abs(yr - curve), px) * _edge(f32(L / 2) - np.abs(xr), px)
        cv.blend(win, a, brow_col)


def _nose(cv: _Canvas, p: dict[str, Any], v: dict[str, Any]) -> None:
    """Bridge shadow on the side away from the light, tip and nostrils."""
    yaw, px = v["yaw"], cv.px
    skin = _skin(p)
    ey = p["face_cy"] + p["eye_y"]
    nose_x = 0.2 * yaw
    tip_y = ey + p["nose_len"]
    nw = p["nose_w"]
    win = cv.window(nose_x, (ey + tip_y) / 2, nw + 0.03, p["nose_len"] / 2 + 0.02)
    if win is not None:
        U, V = cv.coords(win)
        side = 1.0 if v["face_shade"] + yaw * 0.3 >= 0 else -1.0
        xline = f32(nose_x - side * nw * 0.55) + (V - f32(tip_y)) * f32(-0.15 * side)
        a = (
            _edge(f32(0.012) - np.abs(U - xline), px)
            * _edge(V - f32(ey + 0.03), px)
            * _edge(f32(tip_y) - V, px)
            * f32(0.35)
        )
        cv.blend(win, a, skin * 0.55)
    _ellipse(cv, nose_x, tip_y - 0.01, nw * 0.75, nw * 0.45, skin * 0.82, opacity=0.6)
    for sgn in (-1.0, 1.0):
        nostril = p["nostril"]
        _ellipse(cv, nose_x + sgn * nw * 0.55, tip_y + 0.005, nostril * 1.3, nostril * 0.7, skin * 0.3, ang=sgn * 0.35)


def _mouth(cv: _Canvas, p: dict[str, Any], v: dict[str, Any]) -> None:
    """Curved lip band (smile bends it) with an optional dark opening."""
    px = cv.px
    mouth_y = _mouth_y(p)
    mx = 0.14 * v["yaw"]
    mw = p["mouth_w"] * (1.0 + 0.1 * max(v["smile"], 0.0))
    win = cv.window(mx, mouth_y, mw + 0.02, 0.12)
    if win is None:
        return
    U, V = cv.coords(win)
    xr = (U - f32(mx)) * f32(1.0 / mw)
    curve = f32(mouth_y) - f32((p["mouth_curve"] + v["smile"]) * 0.03) * xr * xr
    taper = np.clip(f32(1.0) - xr * xr, 0.0, 1.0)
    dist = np.abs(V - curve)
    half_open = f32(v["mouth_open"]) * taper
    a = _edge(f32(p["lip_thick"]) * taper + half_open - dist, px) * _edge(f32(1.0) - np.abs(xr), px)
    cv.blend(win, a, p["lips"])
    inner = _edge(np.maximum(half_open - dist, f32(-0.004) + f32(0.004) * taper - dist), px) * _edge(
        f32(1.0) - np.abs(xr), px
    )
    cv.blend(win, inner, np.array([0.25, 0.05, 0.06], dtype=np.float32))


def _moles(cv: _Canvas, p: dict[str, Any], yaw: float) -> None:
    skin = _skin(p)
    for mxp, myp, mr in p["moles"]:
        _ellipse(cv, mxp + 0.1 * yaw, p["face_cy"] + myp, mr, mr, skin * 0.35)


def _glasses(cv: _Canvas, p: dict[str, Any], yaw: float) -> None:
    """Two superellipse rings and a bridge."""
    if not p["glasses"]:
        return
    px = cv.px
    ey = p["face_cy"] + p["eye_y"]
    gr = p["glasses_r"] * p["eye_rx"]
    gpow = float(f32(p["glasses_power"]))
    th = p["glasses_thick"]
    centres = []
    for sgn in (-1.0, 1.0):
        cx = _eye_x(p, sgn, yaw)
        centres.append(cx)
        grx = gr * (1.0 - 0.25 * max(0.0, sgn * yaw))
        gry = gr * 0.8
        win = cv.window(cx, ey, grx + th, gr * 0.8 + th)
        if win is None:
            continue
        U, V = cv.coords(win)
        sx, sy = np.abs((U - f32(cx)) * f32(1.0 / grx)), np.abs((V - f32(ey)) * f32(1.0 / gry))
        rr = superellipse_r(sx, sy, gpow)
        a = _edge(f32(th / 2) - np.abs(rr - f32(1.0)) * f32(min(grx, gry)), px)
        cv.blend(win, a, p["glasses_colour"])
    bx0, bx1 = centres[0] + gr * 0.95, centres[1] - gr * 0.95
    if bx1 > bx0:
        win = cv.window((bx0 + bx1) / 2, ey - 0.02, (bx1 - bx0) / 2 + 0.02, th + 0.02)
        if win is not None:
            U, V = cv.coords(win)
            a = _edge(f32(th / 2) - np.abs(V - f32(ey - 0.02)), px) * _edge(
                f32((bx1 - bx0) / 2) - np.abs(U - f32((bx0 + bx1) / 2)), px
            )
            cv.blend(win, a, p["glasses_colour"])


def _lighting(img: np.ndarray, v: dict[str, Any]) -> None:
    """In place: contrast around mid grey, gain with a directional gradient, colour cast."""
    lx, ly = v["light"]
    gain = (f32(v["gain"]) * (f32(1.0) + f32(lx) * _GX + f32(ly) * _GY))[None]
    k = float(v["contrast"])
    img *= gain * (k * v["cast"]).astype(np.float32)[:, None, None]
    img += gain * ((0.5 - 0.5 * k) * v["cast"]).astype(np.float32)[:, None, None]


def _degrade(img: np.ndarray, v: dict[str, Any]) -> np.ndarray:
    """Blur then pixel noise of the float image (clipped to [0, 1] first, as a camera would)."""
    np.clip(img, f32(0.0), f32(1.0), out=img)
    img = blur(img, v["blur"])
    if v["noise"] > 0:
        img = img + _noise_crop(v["noise_seed"]) * f32(v["noise"])
    return img


# -- public ----------------------------------------------------------------------------------------


def render_face(identity: dict[str, Any], variation: dict[str, Any]) -> np.ndarray:
    """Draw one face: uint8 RGB array [112, 112, 3] (HWC) from ``identity_params`` and ``variation_params``."""
    return np.ascontiguousarray(render_face_chw(identity, variation).transpose(1, 2, 0))


def render_face_chw(identity: dict[str, Any], variation: dict[str, Any]) -> np.ndarray:
    """As :func:`render_face` but channel-first, uint8 [3, 112, 112] (the layout the datasets store)."""
    p, v = identity, variation
    yaw = v["yaw"]
    cv = _Canvas(v["tx"], v["ty"], v["scale"], v["rot"])
    _background(cv, v)
    _clothing_and_neck(cv, p, v)
    _hair_behind(cv, p)
    _ears(cv, p, yaw)
    face = _face(cv, p, v)
    _beard(cv, p, face, yaw)
    _hair_front(cv, p)
    _eyes(cv, p, v)
    _brows(cv, p, v)
    _nose(cv, p, v)
    _mouth(cv, p, v)
    _moles(cv, p, yaw)
    _glasses(cv, p, yaw)
    _lighting(cv.img, v)
    return _to_uint8(_degrade(cv.img, v))
