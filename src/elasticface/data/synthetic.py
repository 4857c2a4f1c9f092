"""Procedurally drawn synthetic faces: the built-in data the default run trains and validates on.

Each *identity* is a set of geometric and colour parameters (face shape, hairline and hair colour,
eye spacing / size / iris colour, brow shape, nose, mouth, ears, optional glasses, beard and moles),
drawn from a numpy Generator seeded by ``(seed, identity)``, so identity ``k`` is the same whatever
the size of the dataset it appears in. Each *image* of an identity adds nuisance drawn from a
generator seeded by ``(seed, identity, image_index)``: pose (shift, scale, in-plane rotation, a yaw-like
shift of the inner features), expression (smile, open mouth, eye openness, raised brows, gaze),
lighting (brightness, contrast, a directional gradient, colour cast), background colour and texture,
clothing colour, blur and pixel noise. One factor, ``scale`` in :func:`variation_params`, multiplies
all nuisance: at 0 every image of an identity is byte-identical.

The nuisance is made to dominate raw-pixel distances (background, clothing, lighting and colour cast
cover most of the pixels) while identity lives in shapes and layout, so raw-pixel cosine similarity is
a weak verifier and a network has something to learn.

Rendering is vectorised numpy at 112x112 directly: every part is a soft-edged mask evaluated on the
pixels of its bounding box in the face's canonical coordinates (the image pixel grid mapped through
the inverse pose transform), then alpha-blended.

Public API:

- :func:`identity_params`, :func:`variation_params`, :func:`render_face` (uint8 [112, 112, 3] RGB);
- :class:`SyntheticFaces`: training dataset of (uint8 [3, 112, 112] tensor, label) items;
- :func:`synthetic_pairs`: a :class:`~elasticface.data.pairs.TensorPairSet` of verification pairs from
  identities disjoint from training (identity ids start at ``identity_offset``).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFilter
from torch.utils.data import Dataset

from elasticface.data.pairs import TensorPairSet

IMAGE_SIZE = 112

__all__ = [
    "IMAGE_SIZE",
    "SyntheticFaces",
    "identity_params",
    "render_face",
    "render_face_chw",
    "synthetic_pairs",
    "synthetic_val_sets",
    "variation_params",
]

# Stream tags mixed into the seed so identity and image generators never collide.
_IDENTITY_STREAM = 0x1D
_IMAGE_STREAM = 0x1A

_SKIN_LIGHT = np.array([0.96, 0.80, 0.68])
_SKIN_DARK = np.array([0.36, 0.23, 0.16])
_HAIR_PALETTE = np.array(
    [
        [0.07, 0.05, 0.04],  # black
        [0.22, 0.13, 0.07],  # dark brown
        [0.45, 0.29, 0.14],  # brown
        [0.86, 0.70, 0.40],  # blonde
        [0.62, 0.26, 0.10],  # red
        [0.58, 0.57, 0.55],  # grey
        [0.90, 0.89, 0.86],  # white
        [0.30, 0.18, 0.45],  # dyed
    ]
)
_HAIR_PROBS = np.array([0.26, 0.2, 0.16, 0.12, 0.08, 0.08, 0.05, 0.05])
_IRIS_PALETTE = np.array(
    [
        [0.30, 0.17, 0.08],  # brown
        [0.12, 0.07, 0.04],  # dark brown
        [0.25, 0.45, 0.75],  # blue
        [0.30, 0.55, 0.35],  # green
        [0.50, 0.52, 0.55],  # grey
    ]
)


def _seed_sequence(*keys: int) -> np.random.SeedSequence:
    # SeedSequence accepts any non-negative ints; fold negatives so every int is usable.
    return np.random.SeedSequence([int(k) % (1 << 63) for k in keys])


# --------------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------------


def identity_params(identity: int, seed: int = 0) -> dict[str, Any]:
    """The appearance of one identity: a dict of floats and small arrays, fixed by ``(identity, seed)``.

    Coordinates are canonical face units: the image spans [-1, 1] on both axes, y points down.
    ``variation_level`` in [-1, 1] says whether this identity varies less or more than average
    (see ``variation_spread`` in :class:`SyntheticFaces`).
    """
    rng = np.random.default_rng(_seed_sequence(_IDENTITY_STREAM, seed, identity))
    u = rng.uniform
    p: dict[str, Any] = {}
    p["identity"] = int(identity)
    p["variation_level"] = float(u(-1.0, 1.0))
    # head
    p["face_cy"] = float(u(0.0, 0.08))
    p["face_w"] = float(u(0.46, 0.64))
    p["face_h_top"] = float(u(0.62, 0.78))
    p["face_h_bot"] = float(u(0.66, 0.86))
    p["jaw_power"] = float(u(1.5, 3.2))  # < 2: pointed chin, > 2: square jaw
    tone = u(0.0, 1.0)
    skin = (1 - tone) * _SKIN_LIGHT + tone * _SKIN_DARK
    skin = skin * np.exp(rng.normal(0.0, 0.04, 3))
    p["skin"] = np.clip(skin, 0.0, 1.0)
    # hair
    hair = _HAIR_PALETTE[rng.choice(len(_HAIR_PALETTE), p=_HAIR_PROBS)]
    p["hair"] = np.clip(hair * np.exp(rng.normal(0.0, 0.1, 3)), 0.0, 1.0)
    p["bald"] = bool(u() < 0.1)
    p["hair_volume"] = float(u(0.02, 0.16))
    p["hair_length"] = float(u(-0.3, 0.9))  # lowest y reached by the hair behind the head
    p["hairline"] = float(u(-0.62, -0.3)) if not p["bald"] else -0.95
    p["hairline_curve"] = float(u(-0.4, 1.4))  # > 0: receding at the temples
    p["hair_part"] = float(u(-0.35, 0.35))  # slant of the fringe
    p["fringe_wave"] = float(u(0.0, 0.05))
    p["fringe_freq"] = float(u(8.0, 20.0))
    # ears
    p["ear_size"] = float(u(0.07, 0.13))
    p["ear_y"] = float(u(-0.08, 0.08))
    # eyes
    p["eye_y"] = float(u(-0.14, 0.0))
    p["eye_dx"] = float(u(0.17, 0.30))
    p["eye_rx"] = float(u(0.075, 0.12))
    p["eye_ry"] = float(u(0.35, 0.6))  # relative to eye_rx
    p["eye_tilt"] = float(u(-0.25, 0.25))
    p["iris"] = np.clip(_IRIS_PALETTE[rng.integers(len(_IRIS_PALETTE))] * np.exp(rng.normal(0, 0.1, 3)), 0, 1)
    p["iris_r"] = float(u(0.45, 0.7))  # relative to eye_rx
    # brows
    p["brow_gap"] = float(u(0.07, 0.15))
    p["brow_thick"] = float(u(0.018, 0.055))
    p["brow_len"] = float(u(0.13, 0.24))
    p["brow_arch"] = float(u(-1.0, 4.0))
    p["brow_angle"] = float(u(-0.35, 0.35))
    p["brow_dark"] = float(u(0.35, 0.9))
    # nose
    p["nose_len"] = float(u(0.14, 0.27))
    p["nose_w"] = float(u(0.045, 0.1))
    p["nostril"] = float(u(0.015, 0.03))
    # mouth
    p["mouth_gap"] = float(u(0.09, 0.17))  # below the nose tip
    p["mouth_w"] = float(u(0.1, 0.2))
    p["lip_thick"] = float(u(0.018, 0.045))
    p["mouth_curve"] = float(u(-1.5, 2.0))
    lip_red = u(0.15, 0.55)
    p["lips"] = np.clip((1 - lip_red) * p["skin"] * 0.85 + lip_red * np.array([0.75, 0.2, 0.25]), 0, 1)
    # marks
    p["glasses"] = bool(u() < 0.25)
    p["glasses_r"] = float(u(1.25, 1.6))  # relative to eye_rx
    p["glasses_power"] = float(u(2.0, 5.0))  # 2: round, larger: rectangular
    p["glasses_thick"] = float(u(0.012, 0.03))
    p["glasses_colour"] = np.clip(rng.uniform(0.0, 0.6, 3) * (u() < 0.6), 0, 1)
    p["beard"] = int(rng.choice(3, p=[0.7, 0.15, 0.15]))  # 0 none, 1 moustache, 2 full beard
    n_moles = int(rng.choice(4, p=[0.45, 0.3, 0.15, 0.1]))
    p["moles"] = np.stack([rng.uniform(-0.35, 0.35, n_moles), rng.uniform(-0.2, 0.5, n_moles), rng.uniform(0.012, 0.028, n_moles)], axis=1)
    return p


def variation_params(identity: int, image_index: int, seed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    """Per-image nuisance for image ``image_index`` of ``identity``; every amplitude is multiplied by ``scale``.

    At ``scale == 0`` the parameters are the neutral ones (centred, frontal, neutral expression,
    neutral grey background, no blur or noise), whatever ``image_index`` is.
    """
    rng = np.random.default_rng(_seed_sequence(_IMAGE_STREAM, seed, identity, image_index))
    s = float(max(scale, 0.0))
    n = rng.normal
    u = rng.uniform
    v: dict[str, Any] = {}
    # pose
    v["tx"] = s * float(n(0.0, 0.05))
    v["ty"] = s * float(n(0.0, 0.05))
    v["scale"] = float(np.exp(s * np.clip(n(0.0, 0.045), -0.1, 0.1)))
    v["rot"] = s * float(np.clip(n(0.0, 0.07), -0.2, 0.2))
    v["yaw"] = s * float(np.clip(n(0.0, 0.4), -1.0, 1.0))
    # expression
    v["smile"] = s * float(n(0.0, 1.2))
    v["mouth_open"] = s * float(max(0.0, n(0.0, 0.025)))
    v["eye_open"] = float(np.clip(1.0 - s * abs(n(0.0, 0.25)), 0.15, 1.0))
    v["brow_raise"] = s * float(n(0.0, 0.02))
    v["gaze"] = s * float(n(0.0, 0.25))
    # lighting and colour
    v["gain"] = float(np.exp(s * n(0.0, 0.22)))
    v["contrast"] = float(np.exp(s * n(0.0, 0.2)))
    ang = u(0.0, 2 * math.pi)
    strength = s * float(abs(n(0.0, 0.35)))
    v["light"] = (strength * math.cos(ang), strength * math.sin(ang))
    v["cast"] = np.exp(s * n(0.0, 0.09, 3))
    v["face_shade"] = s * float(n(0.0, 0.25))  # side lighting across the face
    # background and clothing
    v["bg"] = np.clip(0.5 + s * u(-0.45, 0.45, 3), 0, 1)
    v["bg2"] = np.clip(v["bg"] + s * n(0.0, 0.18, 3), 0, 1)
    v["bg_dir"] = float(u(0.0, 2 * math.pi))
    v["bg_waves"] = np.stack([u(1.0, 9.0, 3), u(0.0, 2 * math.pi, 3), u(0.0, 2 * math.pi, 3), s * u(0.0, 0.1, 3)], axis=1)
    v["cloth"] = np.clip(0.35 + s * u(-0.33, 0.6, 3), 0, 1)
    v["cloth_h"] = float(1.3 + s * u(-0.12, 0.12))
    # degradations
    v["blur"] = s * float(min(abs(n(0.0, 0.55)), 1.5))
    v["noise"] = s * float(u(0.0, 0.035))
    v["noise_seed"] = int(rng.integers(1 << 31))
    return v


# --------------------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------------------

_N = IMAGE_SIZE
_GRID = ((np.arange(_N, dtype=np.float32) + 0.5) * (2.0 / _N) - 1.0).astype(np.float32)
_GX = np.broadcast_to(_GRID[None, :], (_N, _N))
_GY = np.broadcast_to(_GRID[:, None], (_N, _N))


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

    def window(self, cx: float, cy: float, hx: float, hy: float | None = None) -> tuple[slice, slice] | None:
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

    def coords(self, win: tuple[slice, slice]) -> tuple[np.ndarray, np.ndarray]:
        return self.U[win], self.V[win]

    def blend(self, win: tuple[slice, slice], alpha: np.ndarray, colour: np.ndarray) -> None:
        """img = img + alpha * (colour - img) on the window; colour is [3] or [3, h, w]."""
        region = self.img[:, win[0], win[1]]
        colour = np.asarray(colour, dtype=np.float32)
        if colour.ndim == 1:
            colour = colour[:, None, None]
        region += alpha[None] * (colour - region)


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


def render_face(identity: dict[str, Any], variation: dict[str, Any]) -> np.ndarray:
    """Draw one face: uint8 RGB array [112, 112, 3] (HWC) from :func:`identity_params` and :func:`variation_params`."""
    return np.ascontiguousarray(render_face_chw(identity, variation).transpose(1, 2, 0))


def render_face_chw(identity: dict[str, Any], variation: dict[str, Any]) -> np.ndarray:
    """As :func:`render_face` but channel-first, uint8 [3, 112, 112] (the layout the datasets store)."""
    p, v = identity, variation
    f32 = np.float32
    cv = _Canvas(v["tx"], v["ty"], v["scale"], v["rot"])
    px = cv.px
    img = cv.img

    # background: two-colour gradient plus low-frequency waves (in image coordinates: it does not move with the head)
    t = (f32(0.5 * math.cos(v["bg_dir"])) * _GRID + f32(0.5))[None, :] + (f32(0.5 * math.sin(v["bg_dir"])) * _GRID)[:, None]
    np.multiply(t[None], (v["bg2"] - v["bg"]).astype(np.float32)[:, None, None], out=img)
    img += v["bg"].astype(np.float32)[:, None, None]
    freq, ph, ang, amp = (w.astype(np.float32) for w in v["bg_waves"].T)  # one wave per channel
    if amp.any():
        arg = ((freq * np.cos(ang))[:, None] * _GRID + ph[:, None])[:, None, :] + ((freq * np.sin(ang))[:, None] * _GRID)[:, :, None]
        wave = np.sin(arg, out=arg)
        wave *= amp[:, None, None]
        img += wave

    skin = p["skin"].astype(np.float32)
    hair = p["hair"].astype(np.float32)
    fcy = p["face_cy"]
    fw, fht, fhb = p["face_w"], p["face_h_top"], p["face_h_bot"]
    yaw = v["yaw"]

    # clothing / shoulders and neck
    _ellipse(cv, 0.0, fcy + v["cloth_h"], 1.05, 0.55, v["cloth"])
    neck_w = 0.55 * fw
    win = cv.window(0.0, fcy + 0.75, neck_w + 0.05, 0.45)
    if win is not None:
        U, V = cv.coords(win)
        a = _edge(f32(neck_w) - np.abs(U - f32(0.03 * yaw)), px) * _edge(V - f32(fcy + 0.3), px)
        cv.blend(win, a, skin * 0.78)

    # hair behind the head
    hv = p["hair_volume"]
    if not p["bald"]:
        rx, ry = fw + hv, fht + hv
        y0, y1 = fcy - ry, max(fcy + p["hair_length"], fcy - ry + 0.05)
        win = cv.window(0.0, (y0 + y1) / 2, rx, (y1 - y0) / 2)
        if win is not None:
            U, V = cv.coords(win)
            r_up = _ellipse_r(U, V, 0.0, fcy, rx, ry)
            # below the head centre the hair falls straight down to hair_length
            side = np.where(V > f32(fcy), np.abs(U) * f32(1.0 / rx), r_up)
            a = _edge((1.0 - side) * min(rx, ry), px) * _edge(f32(fcy + p["hair_length"]) - V, px)
            cv.blend(win, a, hair * 0.85)

    # ears
    for sgn in (-1.0, 1.0):
        ex = sgn * fw * (1.0 - 0.04 * sgn * yaw) - 0.02 * yaw
        _ellipse(cv, ex, fcy + p["ear_y"], p["ear_size"] * 0.6, p["ear_size"], skin * 0.88)

    # face: ellipse on top, superellipse (jaw) below, shaded by side light and towards the rim
    win = cv.window(0.0, fcy + (fhb - fht) / 2, fw, (fht + fhb) / 2)
    U, V = cv.coords(win)
    dx = np.abs(U) * f32(1.0 / fw)
    dy_t = (V - f32(fcy)) * f32(1.0 / fht)
    dy_b = (V - f32(fcy)) * f32(1.0 / fhb)
    jp = f32(p["jaw_power"])
    r_top = np.sqrt(dx * dx + dy_t * dy_t)
    r_bot = (dx**jp + np.abs(dy_b) ** jp) ** (f32(1.0) / jp)
    r = np.where(V < f32(fcy), r_top, r_bot)
    face_alpha = _edge((1.0 - r) * min(fw, fht, fhb), px)
    shade = f32(1.0) - f32(0.18) * r * r + f32(v["face_shade"]) * U
    cv.blend(win, face_alpha, skin[:, None, None] * shade[None])

    # beard / moustache (drawn before the mouth)
    mouth_y = fcy + p["eye_y"] + p["nose_len"] + p["mouth_gap"]
    if p["beard"] == 2:
        a = face_alpha * _edge(V - f32(mouth_y - 0.08), px) * f32(0.9)
        cv.blend(win, a, hair)
    if p["beard"] >= 1:
        _ellipse(cv, 0.0 + 0.1 * yaw, mouth_y - 0.05, p["mouth_w"] * 1.2, 0.035, hair, opacity=0.95)

    # hair over the forehead: inside the (enlarged) head ellipse and above the hairline
    if not p["bald"]:
        rx, ry = fw + 0.6 * hv, fht + hv
        y0, y1 = fcy - ry, min(fcy + p["hairline"] + 0.6, fcy + ry)
        win = cv.window(0.0, (y0 + y1) / 2, rx, (y1 - y0) / 2)
        U, V = cv.coords(win)
        r = _ellipse_r(U, V, 0.0, fcy, rx, ry)
        xs = U * f32(1.0 / fw)
        line = f32(fcy + p["hairline"]) + f32(0.25 * p["hairline_curve"]) * xs * xs * np.abs(xs) + f32(p["hair_part"] * 0.3) * xs
        line = line + f32(p["fringe_wave"]) * np.sin(f32(p["fringe_freq"]) * U)
        a = _edge((1.0 - r) * min(rx, ry), px) * _edge(line - V, px)
        cv.blend(win, a, hair)
    elif p["hair_volume"] > 0.1:  # bald on top, hair on the sides
        for sgn in (-1.0, 1.0):
            _ellipse(cv, sgn * fw * 0.93, fcy - 0.1, 0.08, 0.22, hair, opacity=0.9)

    # eyes (yaw shifts the inner features and narrows the far eye)
    ey = fcy + p["eye_y"]
    feat_dx = 0.12 * yaw
    eye_rx = p["eye_rx"]
    eye_ry = eye_rx * p["eye_ry"]
    for sgn in (-1.0, 1.0):
        cx = sgn * p["eye_dx"] * (1.0 - 0.12 * sgn * yaw) + feat_dx
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

    # brows: arched bands above the eyes
    brow_col = hair * (1.0 - p["brow_dark"]) + skin * 0.25 * p["brow_dark"]
    for sgn in (-1.0, 1.0):
        bx = sgn * p["eye_dx"] * (1.0 - 0.12 * sgn * yaw) + feat_dx
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

    # nose: bridge shadow, tip and nostrils
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

    # mouth: curved lip band with optional opening
    mx = 0.14 * yaw
    mw = p["mouth_w"] * (1.0 + 0.1 * max(v["smile"], 0.0))
    win = cv.window(mx, mouth_y, mw + 0.02, 0.12)
    if win is not None:
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

    # moles
    for mxp, myp, mr in p["moles"]:
        _ellipse(cv, mxp + 0.1 * yaw, fcy + myp, mr, mr, skin * 0.35)

    # glasses: two rings and a bridge
    if p["glasses"]:
        gr = p["glasses_r"] * eye_rx
        gpow = f32(p["glasses_power"])
        th = p["glasses_thick"]
        centres = []
        for sgn in (-1.0, 1.0):
            cx = sgn * p["eye_dx"] * (1.0 - 0.12 * sgn * yaw) + feat_dx
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

    # lighting: contrast around mid grey, gain with a directional gradient, colour cast
    lx, ly = v["light"]
    gain = (f32(v["gain"]) * (f32(1.0) + f32(lx) * _GX + f32(ly) * _GY))[None]
    k = float(v["contrast"])
    img *= gain * (k * v["cast"]).astype(np.float32)[:, None, None]
    img += gain * ((0.5 - 0.5 * k) * v["cast"]).astype(np.float32)[:, None, None]
    out = _to_uint8(img)
    out = _blur(out, v["blur"])
    if v["noise"] > 0:
        out = _to_uint8(out * f32(1.0 / 255.0) + _noise_crop(v["noise_seed"]) * f32(v["noise"]))
    return out


def _to_uint8(img: np.ndarray) -> np.ndarray:
    img = img * np.float32(255.0)
    img += np.float32(0.5)
    np.clip(img, 0.0, 255.0, out=img)
    return img.astype(np.uint8)


def _render(identity: int, image_index: int, seed: int, scale: float, ident: dict[str, Any] | None = None) -> np.ndarray:
    """uint8 [3, 112, 112] image ``image_index`` of ``identity``."""
    ident = ident if ident is not None else identity_params(identity, seed)
    return render_face_chw(ident, variation_params(identity, image_index, seed, scale))


def _identity_scale(ident: dict[str, Any], intra_class_variation: float, variation_spread: float) -> float:
    """Nuisance scale of one identity: the global factor times (1 + spread * level), level in [-1, 1]."""
    return float(intra_class_variation * max(0.0, 1.0 + variation_spread * ident["variation_level"]))


# --------------------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------------------


class SyntheticFaces(Dataset):
    """Training faces: ``num_identities`` identities x ``images_per_identity`` images, deterministic from ``seed``.

    Item ``i`` is (uint8 RGB tensor [3, 112, 112], label in [0, num_identities)): image
    ``i % images_per_identity`` of identity id ``identity_offset + i // images_per_identity``.
    Identity ids, not labels, fix the appearance, so datasets with disjoint id ranges (train vs.
    :func:`synthetic_pairs`) have disjoint identities.

    ``intra_class_variation`` scales all per-image nuisance (0: every image of an identity is the same);
    ``variation_spread`` in [0, 1] makes some identities vary more than others (their scale is
    ``intra_class_variation * (1 + variation_spread * level)`` with a per-identity level in [-1, 1]).
    ``identity_variation``, one factor per identity, sets those scales explicitly instead
    (``intra_class_variation * identity_variation[label]``): the paper's toy example uses it for
    identities of low and of high intra-class variation.

    With ``cache=True`` an image is rendered the first time it is read and kept in a uint8 tensor in an
    anonymous shared mapping (len x 37.6 kB), so forked DataLoader workers fill one cache together;
    ``render_all()`` fills it eagerly. Items are views into the cache: do not modify them in place.
    With ``cache=False``, or in a pickled copy (spawn workers), every read renders again (same bytes:
    rendering is deterministic, ~2 ms per image).
    """

    def __init__(
        self,
        num_identities: int = 100,
        images_per_identity: int = 40,
        seed: int = 0,
        identity_offset: int = 0,
        intra_class_variation: float = 1.0,
        variation_spread: float = 0.5,
        cache: bool = True,
        identity_variation: Sequence[float] | None = None,
    ) -> None:
        if num_identities < 1 or images_per_identity < 1:
            raise ValueError(f"need at least one identity and one image per identity, got {num_identities} x {images_per_identity}")
        if intra_class_variation < 0 or not 0 <= variation_spread <= 1:
            raise ValueError(
                f"intra_class_variation must be >= 0 and variation_spread in [0, 1], got {intra_class_variation}, {variation_spread}"
            )
        if identity_variation is not None and (
            len(identity_variation) != num_identities or any(float(v) < 0 for v in identity_variation)
        ):
            raise ValueError(
                f"identity_variation={list(identity_variation)}: expected {num_identities} factors >= 0, "
                "one per identity (num_identities)"
            )
        self.identity_variation = None if identity_variation is None else [float(v) for v in identity_variation]
        self.num_identities = int(num_identities)
        self.images_per_identity = int(images_per_identity)
        self.seed = int(seed)
        self.identity_offset = int(identity_offset)
        self.intra_class_variation = float(intra_class_variation)
        self.variation_spread = float(variation_spread)
        self.num_classes = self.num_identities
        self.labels = np.repeat(np.arange(self.num_identities, dtype=np.int64), self.images_per_identity)
        self.identity_ids = np.arange(self.identity_offset, self.identity_offset + self.num_identities, dtype=np.int64)
        self._idents: dict[int, dict[str, Any]] = {}
        self._cache: torch.Tensor | None = None
        self._done: torch.Tensor | None = None
        if cache:
            self._cache = _shared_zeros((len(self), 3, IMAGE_SIZE, IMAGE_SIZE), np.uint8)
            self._done = _shared_zeros((len(self),), np.bool_)

    def __len__(self) -> int:
        return self.num_identities * self.images_per_identity

    def __getstate__(self) -> dict[str, Any]:
        # Pickled (spawn / forkserver workers): the shared mapping cannot travel, and a private cache per
        # worker would multiply memory, so the copy renders on the fly (same bytes: rendering is deterministic).
        state = self.__dict__.copy()
        state["_cache"] = state["_done"] = None
        return state

    def _identity(self, identity: int) -> dict[str, Any]:
        ident = self._idents.get(identity)
        if ident is None:
            ident = self._idents[identity] = identity_params(identity, self.seed)
        return ident

    def render(self, index: int) -> torch.Tensor:
        """Render item ``index`` (no cache): uint8 [3, 112, 112]."""
        return torch.from_numpy(self._render_chw(index))

    def _render_chw(self, index: int) -> np.ndarray:
        label, image_index = divmod(int(index), self.images_per_identity)
        identity = self.identity_offset + label
        ident = self._identity(identity)
        if self.identity_variation is not None:
            scale = self.intra_class_variation * self.identity_variation[label]
        else:
            scale = _identity_scale(ident, self.intra_class_variation, self.variation_spread)
        return _render(identity, image_index, self.seed, scale, ident)

    def render_all(self) -> SyntheticFaces:
        """Fill the cache now (no-op without cache); returns self."""
        if self._cache is not None:
            for i in range(len(self)):
                self[i]
        return self

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} synthetic faces")
        label = int(self.labels[index])
        if self._cache is None:
            return self.render(index), label
        if not bool(self._done[index]):
            # write through numpy: torch's threaded copy is slow for many small tensors on few cores
            self._cache.numpy()[index] = self._render_chw(index)
            self._done[index] = True  # after the image: a reader in another worker never sees a half-written one
        return self._cache[index], label


def _shared_zeros(shape: tuple[int, ...], dtype: np.dtype) -> torch.Tensor:
    """Zeroed tensor in an anonymous shared mapping: forked DataLoader workers write into the parent's copy.

    Unlike ``Tensor.share_memory_()`` this does not live in /dev/shm, so a small /dev/shm (Docker's 64 MB
    default) cannot make the cache crash with SIGBUS. Where the mapping is not shared (Windows) it is
    simply private memory.
    """
    count = int(np.prod(shape))
    nbytes = max(count * np.dtype(dtype).itemsize, 1)
    try:
        buffer = mmap.mmap(-1, nbytes)
    except (OSError, ValueError):
        return torch.from_numpy(np.zeros(shape, dtype=dtype))
    return torch.from_numpy(np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape))


def synthetic_pairs(
    name: str = "synthetic",
    num_identities: int = 50,
    num_pairs: int = 600,
    seed: int = 1,
    identity_offset: int = 100000,
    intra_class_variation: float = 1.0,
    variation_spread: float = 0.5,
) -> TensorPairSet:
    """Verification pairs over identity ids ``identity_offset .. identity_offset + num_identities - 1``.

    Exactly half of the ``num_pairs`` pairs are same-identity; same and different pairs alternate
    in a shuffled order within each block of 10 pairs, so any contiguous fold is balanced. Every
    image is a distinct rendering (image indices are never reused). Deterministic from ``seed``.
    """
    if num_pairs < 2 or num_pairs % 2:
        raise ValueError(f"num_pairs must be even and >= 2 (half same, half different), got {num_pairs}")
    if num_identities < 2:
        raise ValueError(f"need at least 2 identities for different-identity pairs, got {num_identities}")
    rng = np.random.default_rng(_seed_sequence(0x9A, seed, identity_offset, num_identities, num_pairs))
    issame = np.tile(np.array([True, False]), num_pairs // 2)
    for b in range(0, num_pairs, 10):
        rng.shuffle(issame[b : b + 10])
    first = rng.integers(num_identities, size=num_pairs)
    other = (first + rng.integers(1, num_identities, size=num_pairs)) % num_identities
    second = np.where(issame, first, other)
    ids = identity_offset + np.stack([first, second], axis=1).reshape(-1)

    idents = {int(i): identity_params(int(i), seed) for i in np.unique(ids)}
    counters: dict[int, int] = {}
    images = np.empty((2 * num_pairs, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    for k, identity in enumerate(ids.tolist()):
        image_index = counters.get(identity, 0)
        counters[identity] = image_index + 1
        ident = idents[identity]
        scale = _identity_scale(ident, intra_class_variation, variation_spread)
        images[k] = _render(identity, image_index, seed, scale, ident)
    pairs = TensorPairSet(name, torch.from_numpy(images), issame)
    pairs.identity_ids = ids.reshape(num_pairs, 2)  # [P, 2] identity id of both images of each pair
    return pairs


def synthetic_val_sets(
    num_identities: int = 100,
    num_pairs: int = 1000,
    seed: int = 1,
    identity_offset: int = 100000,
    intra_class_variation: float = 1.0,
    variation_spread: float = 0.5,
    name: str = "synthetic",
) -> dict[str, TensorPairSet]:
    """The validation sets of the synthetic data config: ``{name: synthetic_pairs(...)}``."""
    pairs = synthetic_pairs(name, num_identities, num_pairs, seed, identity_offset, intra_class_variation, variation_spread)
    return {name: pairs}
