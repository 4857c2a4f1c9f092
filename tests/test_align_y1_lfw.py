"""On real faces, when the data is here: insightface's MobileFaceNet y1 gives the same embedding (cosine >= 0.9999,
the issue's bar) to a face aligned by `norm_crop` and to the same face aligned by insightface's rule run with
OpenCV (tests/helpers/insightface_align.py), from the same MTCNN landmarks.

The data is never in the repository: ELASTICFACE_Y1_PARAMS names y1's `model-0000.params` (insightface's model
zoo, `model-y1-test2/`; `model-symbol.json` beside it) and ELASTICFACE_LFW_DIR an LFW photo folder
(`<Name>/<Name>_NNNN.jpg`, e.g. `images_deepfunneled/` of the LFW site's repository); without them it skips.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from elasticface.align.template import norm_crop

pytest.importorskip("skimage")
pytest.importorskip("cv2")
pytest.importorskip("facenet_pytorch", reason="make install puts facenet-pytorch 2.6.0 (no deps) in the venv")
from helpers.insightface_align import insightface_crop  # noqa: E402

Y1 = os.environ.get("ELASTICFACE_Y1_PARAMS", "")
LFW = os.environ.get("ELASTICFACE_LFW_DIR", "")


def _lfw_photos(count: int) -> list[Path]:
    photos = sorted(Path(LFW).glob("*/*.jpg"))
    return photos[:: max(len(photos) // count, 1)][:count]


@pytest.mark.skipif(not os.path.isfile(Y1), reason="set ELASTICFACE_Y1_PARAMS to y1's model-0000.params")
@pytest.mark.skipif(not _lfw_photos(1) if LFW else True,
                    reason="set ELASTICFACE_LFW_DIR to an LFW photo folder (<Name>/<Name>_NNNN.jpg)")
def test_y1_embeds_our_crop_and_opencvs_alike():
    from elasticface.align.detector import MTCNNDetector
    from elasticface.align.photos import read_photo
    from elasticface.eval.embed import load_model_file

    photos = [read_photo(str(p)) for p in _lfw_photos(6)]
    faces = MTCNNDetector().detect(photos)
    pairs = [(np.asarray(norm_crop(photo, found[0].landmarks)), insightface_crop(photo, found[0].landmarks))
             for photo, found in zip(photos, faces) if found]
    assert len(pairs) >= 5, f"faces found in only {len(pairs)} of 6 LFW photos"
    model = load_model_file(Y1, "cpu")
    batch = np.stack([crop for pair in pairs for crop in pair]).astype(np.float32)
    with torch.no_grad():
        emb = model(torch.from_numpy(batch).permute(0, 3, 1, 2) / 255.0 * 2.0 - 1.0).numpy()
    ours, theirs = emb[0::2], emb[1::2]
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert (cos >= 0.9999).all(), cos
