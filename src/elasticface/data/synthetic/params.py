"""Parameters of the synthetic faces: who a face is (identity) and how one image of it varies (nuisance).

An identity is a dict of shape and colour parameters drawn from a generator seeded by ``(seed, identity)``,
so identity ``k`` is the same whatever the size of the dataset it appears in. An image adds nuisance drawn
from a generator seeded by ``(seed, identity, image_index)``, grouped in :data:`NUISANCE_GROUPS` (pose,
expression, lighting, background, degradation); one factor, ``scale``, multiplies all of it (at 0 every
image of an identity is byte-identical) and per-group factors let a benchmark stress one kind of nuisance.
Coordinates are canonical face units: the image spans [-1, 1] on both axes, y points down.
Like the renderer (see render.py), nothing here may use numpy's transcendental ufuncs or ``math.exp``:
a last-bit difference between machines would reach the pixels; exp, sin and cos come from portable_math.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from elasticface.data.synthetic.portable_math import exp, sincos
from elasticface.utils.errors import BadValue

# Stream tags mixed into the seed so identity and image generators never collide.
_IDENTITY_STREAM = 0x1D
_IMAGE_STREAM = 0x1A

# The nuisance groups of :func:`variation_params`, each scaled by its own factor (default 1).
NUISANCE_GROUPS = ("pose", "expression", "lighting", "background", "degradation")

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


def _exp3(x: np.ndarray) -> np.ndarray:
    """e^x of a few draws, elementwise, with the portable exp."""
    return np.array([exp(t) for t in np.asarray(x, dtype=np.float64)])


def seed_sequence(*keys: int) -> np.random.SeedSequence:
    """A SeedSequence from any ints (negatives folded), so every (seed, id, index) key is usable."""
    return np.random.SeedSequence([int(k) % (1 << 63) for k in keys])


def identity_params(identity: int, seed: int = 0) -> dict[str, Any]:
    """The appearance of one identity: a dict of floats and small arrays, fixed by ``(identity, seed)``.

    ``variation_level`` in [-1, 1] says whether this identity varies less or more than average
    (see ``variation_spread`` in :class:`~elasticface.data.synthetic.SyntheticFaces`).
    """
    rng = np.random.default_rng(seed_sequence(_IDENTITY_STREAM, seed, identity))
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
    skin = skin * _exp3(rng.normal(0.0, 0.04, 3))
    p["skin"] = np.clip(skin, 0.0, 1.0)
    # hair
    hair = _HAIR_PALETTE[rng.choice(len(_HAIR_PALETTE), p=_HAIR_PROBS)]
    p["hair"] = np.clip(hair * _exp3(rng.normal(0.0, 0.1, 3)), 0.0, 1.0)
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
    p["iris"] = np.clip(_IRIS_PALETTE[rng.integers(len(_IRIS_PALETTE))] * _exp3(rng.normal(0, 0.1, 3)), 0, 1)
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
    p["moles"] = np.stack(
        [rng.uniform(-0.35, 0.35, n_moles), rng.uniform(-0.2, 0.5, n_moles), rng.uniform(0.012, 0.028, n_moles)], axis=1
    )
    return p


def nuisance_scales(scale: float, factors: Mapping[str, float] | None = None) -> dict[str, float]:
    """``scale`` times each group's factor (missing groups: 1); a clear error for an unknown group."""
    factors = dict(factors or {})
    unknown = sorted(set(factors) - set(NUISANCE_GROUPS))
    if unknown:
        raise BadValue(f"unknown nuisance group(s) {unknown}: expected some of {list(NUISANCE_GROUPS)}")
    s = float(max(scale, 0.0))
    return {group: s * float(max(factors.get(group, 1.0), 0.0)) for group in NUISANCE_GROUPS}


def variation_params(
    identity: int, image_index: int, seed: int = 0, scale: float = 1.0, factors: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """Per-image nuisance for image ``image_index`` of ``identity``; every amplitude is multiplied by ``scale``
    and by its group's entry of ``factors`` (see :data:`NUISANCE_GROUPS`; default 1).

    At ``scale == 0`` the parameters are the neutral ones (centred, frontal, neutral expression,
    neutral grey background, no blur or noise), whatever ``image_index`` is. The random draws are the
    same whatever the factors, so a factor changes only the size of a nuisance, not which one is drawn.
    """
    rng = np.random.default_rng(seed_sequence(_IMAGE_STREAM, seed, identity, image_index))
    g = nuisance_scales(scale, factors)
    n = rng.normal
    u = rng.uniform
    v: dict[str, Any] = {}
    s = g["pose"]
    v["tx"] = s * float(n(0.0, 0.05))
    v["ty"] = s * float(n(0.0, 0.05))
    v["scale"] = exp(s * float(np.clip(n(0.0, 0.045), -0.1, 0.1)))
    v["rot"] = s * float(np.clip(n(0.0, 0.07), -0.2, 0.2))
    v["yaw"] = s * float(np.clip(n(0.0, 0.4), -1.0, 1.0))
    s = g["expression"]
    v["smile"] = s * float(n(0.0, 1.2))
    v["mouth_open"] = s * float(max(0.0, n(0.0, 0.025)))
    v["eye_open"] = float(np.clip(1.0 - s * abs(n(0.0, 0.25)), 0.15, 1.0))
    v["brow_raise"] = s * float(n(0.0, 0.02))
    v["gaze"] = s * float(n(0.0, 0.25))
    s = g["lighting"]
    v["gain"] = exp(s * n(0.0, 0.22))
    v["contrast"] = exp(s * n(0.0, 0.2))
    ang = u(0.0, 2 * math.pi)
    strength = s * float(abs(n(0.0, 0.35)))
    sin_ang, cos_ang = sincos(ang)
    v["light"] = (strength * cos_ang, strength * sin_ang)
    v["cast"] = _exp3(s * n(0.0, 0.09, 3))
    v["face_shade"] = s * float(n(0.0, 0.25))  # side lighting across the face
    s = g["background"]  # background and clothing
    v["bg"] = np.clip(0.5 + s * u(-0.45, 0.45, 3), 0, 1)
    v["bg2"] = np.clip(v["bg"] + s * n(0.0, 0.18, 3), 0, 1)
    v["bg_dir"] = float(u(0.0, 2 * math.pi))
    v["bg_waves"] = np.stack(
        [u(1.0, 9.0, 3), u(0.0, 2 * math.pi, 3), u(0.0, 2 * math.pi, 3), s * u(0.0, 0.1, 3)], axis=1
    )
    v["cloth"] = np.clip(0.35 + s * u(-0.33, 0.6, 3), 0, 1)
    v["cloth_h"] = float(1.3 + s * u(-0.12, 0.12))
    s = g["degradation"]
    v["blur"] = s * float(min(abs(n(0.0, 0.55)), 1.5))
    v["noise"] = s * float(u(0.0, 0.035))
    v["noise_seed"] = int(rng.integers(1 << 31))
    return v


def identity_scale(ident: dict[str, Any], intra_class_variation: float, variation_spread: float) -> float:
    """Nuisance scale of one identity: the global factor times (1 + spread * level), level in [-1, 1]."""
    return float(intra_class_variation * max(0.0, 1.0 + variation_spread * ident["variation_level"]))
