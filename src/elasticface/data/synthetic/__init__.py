"""Procedurally drawn synthetic faces: the built-in data the default run trains and validates on.

Each *identity* is a set of geometric and colour parameters (face shape, hairline and hair colour, eye
spacing / size / iris colour, brow shape, nose, mouth, ears, optional glasses, beard and moles); each
*image* adds nuisance: pose, expression, lighting, background and clothing, blur and noise. The nuisance
dominates raw-pixel distances while identity lives in shapes and layout, so raw-pixel cosine similarity
is a weak verifier and a network has something to learn.

- ``params.py``: :func:`identity_params`, :func:`variation_params` (deterministic from seeds);
- ``render.py``: :func:`render_face` / :func:`render_face_chw`, one function per face part;
- ``dataset.py``: :class:`SyntheticFaces`, the training set (identity ids from ``identity_offset``);
- ``benchmarks.py``: :func:`synthetic_pairs` and the named verification benchmarks
  (:data:`SYNTHETIC_BENCHMARKS`: synthetic, pose, lighting, expression, hard) from unseen identities.
"""

from elasticface.data.synthetic.benchmarks import SYNTHETIC_BENCHMARKS, Benchmark, synthetic_pairs, synthetic_val_sets
from elasticface.data.synthetic.dataset import SyntheticFaces
from elasticface.data.synthetic.params import NUISANCE_GROUPS, identity_params, variation_params
from elasticface.data.synthetic.render import IMAGE_SIZE, render_face, render_face_chw

__all__ = [
    "IMAGE_SIZE",
    "NUISANCE_GROUPS",
    "SYNTHETIC_BENCHMARKS",
    "Benchmark",
    "SyntheticFaces",
    "identity_params",
    "render_face",
    "render_face_chw",
    "synthetic_pairs",
    "synthetic_val_sets",
    "variation_params",
]
