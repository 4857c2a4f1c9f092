"""Drawing one synthetic face from its identity and nuisance parameters (see ``params.py``).

Rendering is vectorised numpy at 112x112 directly: every part is a soft-edged mask evaluated on the
pixels of its bounding box in the face's canonical coordinates (the image pixel grid mapped through the
inverse pose transform), then alpha-blended onto a channel-first float canvas. :func:`render_face_chw`
calls one function per part, back to front, then applies lighting, blur and noise.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, ImageFilter

IMAGE_SIZE = 112

_N = IMAGE_SIZE
_GRID = ((np.arange(_N, dtype=np.float32) + 0.5) * (2.0 / _N) - 1.0).astype(np.float32)
_GX = np.broadcast_to(_GRID[None, :], (_N, _N))
_GY = np.broadcast_to(_GRID[:, None], (_N, _N))
f32 = np.float32

Window = tuple[slice, slice]


class _Canvas:
    """Float RGB image plus the canonical coordinates of each pixel under the pose transform."""

    def __init__(self, tx: float, ty: float, scale: float, rot: float) -> None:
        self.tx, self.ty, self.s = tx, ty, scale
        self.c, self.sn = math.cos(rot), math.sin(rot)
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


def _ellipse_r(U: np.ndarray, V: np.ndarray, cx: float, cy: float, rx: float, ry: float, ang: float = 0.0) -> np.ndarray:
    dx = U - np.float32(cx)
    dy = V - np.float32(cy)
    if ang:
        c, s = np.float32(math.cos(ang)), np.float32(math.sin(ang))
        dx, dy = c * dx + s * dy, -s * dx + c * dy
    return np.sqrt((dx * np.float32(1.0 / rx)) ** 2 + (dy * np.float32(1.0 / ry)) ** 2)


def _ellipse(cv: _Canvas, cx: float, cy: float, rx: float, ry: float, colour: np.ndarray, ang: float = 0.0, opacity: float = 1.0) -> None:
    win = cv.window(cx, cy, max(rx, ry)) if ang else cv.window(cx, cy, rx, ry)
    if win is None:
        return
    U, V = cv.coords(win)
    r = _ellipse_r(U, V, cx, cy, rx, ry, ang)
    alpha = _edge((1.0 - r) * min(rx, ry), cv.px)
    if opacity != 1.0:
        alpha *= np.float32(opacity)
    cv.blend(win, alpha, colour)


def _blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur (standard deviation ``sigma`` px) of a uint8 [3, 112, 112] image with Pillow (fast, single-threaded C)."""
    if sigma < 0.3:
        return img
    pil = Image.fromarray(np.ascontiguousarray(img.transpose(1, 2, 0)))
    return np.asarray(pil.filter(ImageFilter.GaussianBlur(radius=float(sigma)))).transpose(2, 0, 1)


_NOISE_BANK: np.ndarray | None = None


def _noise_crop(key: int) -> np.ndarray:
    """Unit gaussian noise [3, 112, 112]: a crop of a fixed noise bank picked (offset, flips) by ``key``.

    Much cheaper than drawing fresh normals per image, and just as deterministic.
    """
    global _NOISE_BANK
    if _NOISE_BANK is None:
        _NOISE_BANK = np.random.default_rng(0x5EED).standard_normal((3, 2 * _N, 2 * _N), dtype=np.float32)
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
    t = (f32(0.5 * math.cos(v["bg_dir"])) * _GRID + f32(0.5))[None, :] + (f32(0.5 * math.sin(v["bg_dir"])) * _GRID)[:, None]
    np.multiply(t[None], (v["bg2"] - v["bg"]).astype(np.float32)[:, None, None], out=img)
    img += v["bg"].astype(np.float32)[:, None, None]
    freq, ph, ang, amp = (w.astype(np.float32) for w in v["bg_waves"].T)  # one wave per channel
    if amp.any():
        arg = ((freq * np.cos(ang))[:, None] * _GRID + ph[:, None])[:, None, :] + ((freq * np.sin(ang))[:, None] * _GRID)[:, :, None]
        wave = np.sin(arg, out=arg)
        wave *= amp[:, None, None]
        img += wave


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
    jp = f32(p["jaw_power"])
    r_top = np.sqrt(dx * dx + dy_t * dy_t)
    r_bot = (dx**jp + np.abs(dy_b) ** jp) ** (f32(1.0) / jp)
    r = np.where(V < f32(fcy), r_top, r_bot)
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
    line = f32(fcy + p["hairline"]) + f32(0.25 * p["hairline_curve"]) * xs * xs * np.abs(xs) + f32(p["hair_part"] * 0.3) * xs
    line = line + f32(p["fringe_wave"]) * np.sin(f32(p["fringe_freq"]) * U)
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
        c, s = f32(math.cos(ang)), f32(math.sin(ang))
        ddx, ddy = U - f32(bx), V - f32(by)
        xr = c * ddx + s * ddy
        yr = -s * ddx + c * ddy
        curve = -f32(p["brow_arch"]) * xr * xr
        half_t = f32(p["brow_thick"] * 0.5) * (f32(1.0) - f32(0.5) * (xr * f32(2.0 / L)) ** 2 * sgn * np.sign(xr))
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
        a = _edge(f32(0.012) - np.abs(U - xline), px) * _edge(V - f32(ey + 0.03), px) * _edge(f32(tip_y) - V, px) * f32(0.35)
        cv.blend(win, a, skin * 0.55)
    _ellipse(cv, nose_x, tip_y - 0.01, nw * 0.75, nw * 0.45, skin * 0.82, opacity=0.6)
    for sgn in (-1.0, 1.0):
        _ellipse(cv, nose_x + sgn * nw * 0.55, tip_y + 0.005, p["nostril"] * 1.3, p["nostril"] * 0.7, skin * 0.3, ang=sgn * 0.35)


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
    inner = _edge(np.maximum(half_open - dist, f32(-0.004) + f32(0.004) * taper - dist), px) * _edge(f32(1.0) - np.abs(xr), px)
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
    gpow = f32(p["glasses_power"])
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
        rr = (np.abs((U - f32(cx)) * f32(1.0 / grx)) ** gpow + np.abs((V - f32(ey)) * f32(1.0 / gry)) ** gpow) ** (f32(1.0) / gpow)
        a = _edge(f32(th / 2) - np.abs(rr - f32(1.0)) * f32(min(grx, gry)), px)
        cv.blend(win, a, p["glasses_colour"])
    bx0, bx1 = centres[0] + gr * 0.95, centres[1] - gr * 0.95
    if bx1 > bx0:
        win = cv.window((bx0 + bx1) / 2, ey - 0.02, (bx1 - bx0) / 2 + 0.02, th + 0.02)
        if win is not None:
            U, V = cv.coords(win)
            a = _edge(f32(th / 2) - np.abs(V - f32(ey - 0.02)), px) * _edge(f32((bx1 - bx0) / 2) - np.abs(U - f32((bx0 + bx1) / 2)), px)
            cv.blend(win, a, p["glasses_colour"])


def _lighting(img: np.ndarray, v: dict[str, Any]) -> None:
    """In place: contrast around mid grey, gain with a directional gradient, colour cast."""
    lx, ly = v["light"]
    gain = (f32(v["gain"]) * (f32(1.0) + f32(lx) * _GX + f32(ly) * _GY))[None]
    k = float(v["contrast"])
    img *= gain * (k * v["cast"]).astype(np.float32)[:, None, None]
    img += gain * ((0.5 - 0.5 * k) * v["cast"]).astype(np.float32)[:, None, None]


def _degrade(out: np.ndarray, v: dict[str, Any]) -> np.ndarray:
    """Blur then pixel noise of the uint8 image."""
    out = _blur(out, v["blur"])
    if v["noise"] > 0:
        out = _to_uint8(out * f32(1.0 / 255.0) + _noise_crop(v["noise_seed"]) * f32(v["noise"]))
    return out


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
    return _degrade(_to_uint8(cv.img), v)
