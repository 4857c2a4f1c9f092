"""Are two photos the same person? Cosine similarity of the protocol's embeddings and a verdict at a threshold.

Each photo is used as it is when it is already an aligned `image_size` square, else MTCNN finds the face (the
largest, when there are several) and it is aligned by insightface's rule first. The embedding is the
verification protocol's: (x / 255 - 0.5) / 0.5, the face plus its mirror image, L2-normalised. The threshold is
given, or the one eval.py stored for the model file (`elasticface.eval.thresholds`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch

from elasticface.align.detector import MTCNNDetector
from elasticface.align.folder import pick_face
from elasticface.align.photos import DEFAULT_MAX_PIXELS, read_photo
from elasticface.align.template import norm_crop
from elasticface.eval.embedding_loop import Embedder, resolve_device
from elasticface.metrics.verification import flip_fused_embeddings
from elasticface.utils.errors import BadValue

ALIGN_MODES = ("auto", "always", "never")


@dataclass
class Comparison:
    a: str
    b: str
    cosine: float
    threshold: float | None
    threshold_from: str | None
    same: bool | None
    aligned: tuple[str, str]  # per photo: "as given" or "detected (n faces)"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        if self.threshold is None:
            return (f"cosine similarity {self.cosine:.4f} (no threshold: give --threshold, or run eval.py on a .bin "
                    f"set with these weights to store one beside them)")
        verdict = "same person" if self.same else "different people"
        sign = ">" if self.same else "<="
        return f"{verdict}: cosine {self.cosine:.4f} {sign} threshold {self.threshold:.4f} ({self.threshold_from})"


def face_of(path: str, align: str = "auto", detector: Callable[[], MTCNNDetector] | None = None,
            image_size: int = 112, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[np.ndarray, str]:
    """The aligned uint8 RGB face of the photo at `path`, and how it was obtained."""
    if align not in ALIGN_MODES:
        raise BadValue(f"align={align!r}; expected one of {ALIGN_MODES}")
    photo = read_photo(path, max_pixels)
    is_aligned = photo.shape[:2] == (image_size, image_size)
    if align == "never" or (align == "auto" and is_aligned):
        if not is_aligned:
            raise BadValue(f"{path}: {photo.shape[1]}x{photo.shape[0]} is not an aligned {image_size}x{image_size} "
                             f"face; leave out --align never to detect and align it")
        return photo, "as given"
    faces = (detector() if detector else MTCNNDetector()).detect([photo])[0]
    if not faces:
        raise BadValue(f"{path}: no face found")
    face = pick_face(faces, (photo.shape[1], photo.shape[0]), "largest")
    note = "detected" if len(faces) == 1 else f"detected, the largest of {len(faces)} faces"
    return np.asarray(norm_crop(photo, face.landmarks, image_size)), note


@torch.no_grad()
def embed_faces(model: Embedder, faces: list[np.ndarray], flip: bool = True,
                device: str | torch.device = "cpu") -> torch.Tensor:
    """L2-normalised protocol embeddings [N, D] of uint8 RGB faces [S, S, 3]."""
    batch = torch.from_numpy(np.stack(faces)).permute(0, 3, 1, 2).float().to(resolve_device(device))
    batch = (batch / 255.0 - 0.5) / 0.5
    return torch.nn.functional.normalize(flip_fused_embeddings(model, batch, flip).float().cpu(), dim=1)


def compare(model: Embedder, a: str, b: str, threshold: tuple[float, str] | None = None, flip: bool = True,
            device: str | torch.device = "cpu", align: str = "auto",
            detector: Callable[[], MTCNNDetector] | None = None, image_size: int = 112) -> Comparison:
    """Compare the faces of photos `a` and `b`; `threshold` is (cosine threshold, where it came from) or None."""
    made: list[MTCNNDetector] = []

    def shared() -> MTCNNDetector:  # built once, and only when a photo needs detecting
        if not made:
            made.append(detector() if detector else MTCNNDetector())
        return made[0]

    (face_a, how_a), (face_b, how_b) = (face_of(p, align, shared, image_size) for p in (a, b))
    emb = embed_faces(model, [face_a, face_b], flip, device)
    cosine = float(emb[0] @ emb[1])
    value, source = threshold if threshold is not None else (None, None)
    same = None if value is None else bool(cosine > value)
    return Comparison(a, b, cosine, value, source, same, (how_a, how_b))
