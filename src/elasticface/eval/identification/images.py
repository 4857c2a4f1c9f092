"""An identification set's images embedded a piece at a time: a million faces never sit in memory as float32.

The images are `data.folder.ImageFiles` with `skip_unreadable`: one bad file among a million is counted and
skipped (`count_unreadable`), not a stopped run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Subset

from elasticface.data.folder import ImageFiles
from elasticface.utils.errors import BadValue
from elasticface.utils.progress import Progress

EMBED_PIECE = 16_384  # images embedded per call, each piece stored (float16 by default) before the next


def embed_images(model: Any, dataset: ImageFiles, dtype: torch.dtype, batch_size: int, flip: bool,
                 device: Any, num_workers: int,
                 on_piece: Callable[[np.ndarray, np.ndarray], None] | None = None,
                 what: str = "megaface") -> tuple[Tensor, np.ndarray]:
    """(L2-normalised features [N, D] of `dtype`, valid [N]), embedded EMBED_PIECE images at a time so that a
    million faces never sit in memory as float32; `on_piece(rows, float32 features)` sees each piece first. Says
    how far it is as the other embedding passes do (a line every tenth, at least every 30 s), the line starting
    `what`."""
    from elasticface.eval.embedding_loop import embed_dataset

    out: Tensor | None = None
    valid = np.zeros(len(dataset), dtype=bool)
    with Progress(f"{what}: embedding the {len(dataset):,} images under {dataset.root}", len(dataset)) as progress:
        for start in range(0, len(dataset), EMBED_PIECE):
            piece = Subset(dataset, range(start, min(start + EMBED_PIECE, len(dataset))))
            emb, idx = embed_dataset(model, piece, batch_size, flip, device, num_workers, progress=progress.advance)
            good = idx >= 0
            emb, idx = torch.nn.functional.normalize(emb[good], dim=1), idx[good].numpy()
            if out is None:
                out = torch.zeros(len(dataset), emb.shape[1], dtype=dtype)
            out[torch.from_numpy(idx)] = emb.to(dtype)
            valid[idx] = True
            if on_piece is not None and len(idx):
                on_piece(idx, emb.numpy())
        progress.done()
    if out is None:
        raise BadValue(f"no image to embed under {dataset.root}")
    return out, valid


def count_unreadable(paths: list[str], ok: np.ndarray, folder: str, problems: list[str]) -> None:
    """One line of `problems` for the images that could not be read, naming the first."""
    if not ok.all():
        first = paths[int(np.flatnonzero(~ok)[0])]
        problems.append(f"{folder}: {int((~ok).sum())} of {len(paths)} images unreadable (skipped; first "
                        f"{os.path.join(folder, first)})")
