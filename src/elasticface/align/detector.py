"""MTCNN face detection with 5 landmarks, batched over photos (of any sizes) on the CPU or a GPU.

The cascade and its constants are those of the MTCNN release as facenet-pytorch runs it (minimum face 20 px,
pyramid factor 0.709, thresholds 0.6 / 0.7 / 0.7, area resampling, (x - 127.5) / 128), so that its landmarks
are the ones the reference code gives on the same weights (the tests check 1 px). Photos of the same size share
one proposal pass per pyramid scale; every candidate of every photo goes through the refine and output nets in
one batch.

A face that fills the photo (a tight crop, the face cut by the photo's edge) is where the cascade fails: its stages
cut boxes clipped to the photo and stretch them, and no pyramid scale holds a face larger than the photo. On 200
LFW faces cropped to their landmarks' box plus 10-30% a side, 1.5% were found, with landmarks 0.6 inter-ocular
distances off (98.5% and 0.055 with the second search). So a photo where no face was found, or whose largest face's
box reaches past the photo's edge, is searched again inside a mid-grey border (`pad` times its longer side on each
side, grey 128: what the nets read as 0); its faces, mapped back, replace the first search's, and a face of the
first that none of them covers is kept (docs/align.md has the figures). Loose photos are not searched twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import batched_nms

from elasticface.align.mtcnn import load_mtcnn
from elasticface.utils.errors import BadValue

_CHUNK = 512  # crops per refine/output forward: bounds the memory of photos with thousands of candidates
PAD = 0.5  # the second search's border (module docstring); chosen on LFW tight crops (bench_tight_crops.py)
_GREY = 128.0


@dataclass
class Face:
    """One detection: box (x1, y1, x2, y2) in photo pixels, the output net's probability, 5 landmarks [5, 2]
    in insightface's template order as seen in the image: left eye, right eye, nose tip, left and right mouth
    corner."""

    box: np.ndarray
    score: float
    landmarks: np.ndarray

    @property
    def area(self) -> float:
        return float(max(self.box[2] - self.box[0], 0) * max(self.box[3] - self.box[1], 0))


def _square(boxes: Tensor) -> Tensor:
    """Each box grown to a square about its centre (the nets see square crops)."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    side = torch.maximum(w, h)
    out = boxes.clone()
    out[:, 0] = boxes[:, 0] + w * 0.5 - side * 0.5
    out[:, 1] = boxes[:, 1] + h * 0.5 - side * 0.5
    out[:, 2] = out[:, 0] + side
    out[:, 3] = out[:, 1] + side
    return out


def _regress(boxes: Tensor, offsets: Tensor) -> Tensor:
    """Box corners moved by the net's offsets, in units of the (inclusive-pixel) box size."""
    w = boxes[:, 2] - boxes[:, 0] + 1
    h = boxes[:, 3] - boxes[:, 1] + 1
    out = boxes.clone()
    out[:, :4] = boxes[:, :4] + offsets * torch.stack([w, h, w, h], 1)
    return out


def _nms_min(boxes: Tensor, scores: Tensor, threshold: float) -> Tensor:
    """Greedy NMS where overlap is intersection over the smaller box (MTCNN's last stage), inclusive pixels."""
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    order = torch.argsort(scores, descending=True)
    keep = []
    while order.numel():
        i, rest = order[0], order[1:]
        keep.append(i)
        lo = torch.maximum(boxes[i, :2], boxes[rest, :2])
        hi = torch.minimum(boxes[i, 2:4], boxes[rest, 2:4])
        inter = (hi - lo + 1).clamp(min=0).prod(1)
        order = rest[inter / torch.minimum(area[i], area[rest]) <= threshold]
    return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long, device=boxes.device)


class MTCNNDetector:
    """`detect(photos)` -> the faces of each photo, highest probability first.

    photos: uint8 RGB arrays [H, W, 3] (grey [H, W] is repeated to 3 channels). weights_dir: where pnet.pt,
    rnet.pt and onet.pt are (default: the installed facenet-pytorch 2.6.0 wheel's data folder). pad: the grey
    border, as a fraction of the photo's longer side, of the second search for faces that fill the photo
    (0: no second search, the plain cascade).
    """

    def __init__(self, device: str | torch.device = "cpu", weights_dir: str | None = None, min_face_size: int = 20,
                 thresholds: tuple[float, float, float] = (0.6, 0.7, 0.7), factor: float = 0.709,
                 pad: float = PAD) -> None:
        self.device = torch.device(device)
        self.pnet, self.rnet, self.onet = (net.to(self.device) for net in load_mtcnn(weights_dir))
        self.min_face_size, self.thresholds, self.factor = min_face_size, thresholds, factor
        if pad < 0:
            raise BadValue(f"MTCNN: pad={pad}; expected a fraction of the photo's longer side >= 0")
        self.pad = pad

    # -- stage 1: proposals over the image pyramid -----------------------------------------------------------

    def _propose(self, batch: Tensor) -> tuple[Tensor, Tensor]:
        """Candidate boxes [N, 5] (x1, y1, x2, y2, score) and their photo index in `batch` [B, 3, H, W]."""
        height, width = batch.shape[2:]
        scale = 12.0 / self.min_face_size
        shortest = min(height, width) * scale
        found, owners = [], []
        while shortest >= 12:
            x = F.interpolate(batch, size=(int(height * scale + 1), int(width * scale + 1)), mode="area")
            offsets, prob = self.pnet((x - 127.5) * 0.0078125)
            mask = prob >= self.thresholds[0]
            cells = mask.nonzero()
            corner = cells[:, [2, 1]].to(prob.dtype)  # (column, row) of each 12x12 window at stride 2
            boxes = torch.cat([torch.floor((2 * corner + 1) / scale), torch.floor((2 * corner + 12) / scale),
                               prob[mask][:, None], offsets.permute(0, 2, 3, 1)[mask]], 1)
            keep = batched_nms(boxes[:, :4], boxes[:, 4], cells[:, 0], 0.5)
            found.append(boxes[keep])
            owners.append(cells[keep, 0])
            scale *= self.factor
            shortest *= self.factor
        if not found:
            return batch.new_zeros(0, 5), torch.zeros(0, dtype=torch.long, device=batch.device)
        boxes, owner = torch.cat(found), torch.cat(owners)
        keep = batched_nms(boxes[:, :4], boxes[:, 4], owner, 0.7)
        boxes, owner = boxes[keep], owner[keep]
        w = (boxes[:, 2] - boxes[:, 0])[:, None]
        h = (boxes[:, 3] - boxes[:, 1])[:, None]
        moved = boxes[:, :4] + boxes[:, 5:9] * torch.cat([w, h, w, h], 1)
        return _square(torch.cat([moved, boxes[:, 4:5]], 1)), owner

    # -- stages 2 and 3: crops through the refine and output nets -----------------------------------------

    @staticmethod
    def _crops(photos: Sequence[Tensor], boxes: Tensor, owner: Tensor, size: int) -> tuple[Tensor, Tensor]:
        """Each box cut from its photo (clipped to the photo), resampled to size x size; and which boxes had
        pixels (boxes wholly outside are dropped)."""
        ints = boxes[:, :4].trunc().int().cpu().numpy()
        crops, valid = [], []
        for k, (x, y, ex, ey) in enumerate(ints):
            photo = photos[int(owner[k])]
            x, y = max(x, 1), max(y, 1)
            ex, ey = min(ex, photo.shape[2]), min(ey, photo.shape[1])
            if ey > y - 1 and ex > x - 1:
                crops.append(F.interpolate(photo[None, :, y - 1:ey, x - 1:ex], size=(size, size), mode="area"))
                valid.append(k)
        if not crops:
            return boxes.new_zeros(0, 3, size, size), torch.zeros(0, dtype=torch.long, device=boxes.device)
        return (torch.cat(crops) - 127.5) * 0.0078125, torch.tensor(valid, device=boxes.device)

    def _refine(self, photos: Sequence[Tensor], boxes: Tensor, owner: Tensor,
                threshold: float) -> tuple[Tensor, Tensor]:
        crops, valid = self._crops(photos, boxes, owner, 24)
        boxes, owner = boxes[valid], owner[valid]
        outs = [self.rnet(chunk) for chunk in crops.split(_CHUNK)] or [(crops.new_zeros(0, 4), crops.new_zeros(0))]
        offsets, prob = torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
        passed = prob > threshold
        boxes = torch.cat([boxes[passed, :4], prob[passed, None]], 1)
        owner, offsets = owner[passed], offsets[passed]
        keep = batched_nms(boxes[:, :4], boxes[:, 4], owner, 0.7)
        return _square(_regress(boxes[keep], offsets[keep])), owner[keep]

    def _locate_landmarks(self, photos: Sequence[Tensor], boxes: Tensor, owner: Tensor,
                          threshold: float) -> tuple[Tensor, Tensor, Tensor]:
        """MTCNN's last stage (O-Net): the boxes that pass it, their 5 landmarks [N, 5, 2] and photo index."""
        crops, valid = self._crops(photos, boxes, owner, 48)
        boxes, owner = boxes[valid], owner[valid]
        outs = [self.onet(chunk) for chunk in crops.split(_CHUNK)]
        if not outs:
            return boxes.new_zeros(0, 5), boxes.new_zeros(0, 5, 2), owner
        offsets, points, prob = (torch.cat([o[i] for o in outs]) for i in range(3))
        passed = prob > threshold
        boxes = torch.cat([boxes[passed, :4], prob[passed, None]], 1)
        owner, offsets, points = owner[passed], offsets[passed], points[passed]
        w = (boxes[:, 2] - boxes[:, 0] + 1)[:, None]
        h = (boxes[:, 3] - boxes[:, 1] + 1)[:, None]
        landmarks = torch.stack([w * points[:, :5] + boxes[:, 0:1] - 1, h * points[:, 5:] + boxes[:, 1:2] - 1], 2)
        return _regress(boxes, offsets), landmarks, owner

    def _tensor(self, photo: np.ndarray) -> Tensor:
        arr = np.asarray(photo)
        if arr.ndim == 2:
            arr = np.repeat(arr[:, :, None], 3, axis=2)
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
            raise BadValue(f"MTCNN: expected uint8 RGB [H, W, 3] photos, got {arr.dtype} {arr.shape}")
        return torch.from_numpy(np.array(arr)).to(self.device).permute(2, 0, 1).float()

    @torch.no_grad()
    def detect(self, photos: Sequence[np.ndarray]) -> list[list[Face]]:
        tensors = [self._tensor(photo) for photo in photos]
        faces = self._cascade(tensors)
        again = [i for i, found in enumerate(faces) if self.pad > 0 and _fills_photo(found, tensors[i].shape)]
        if again:
            borders = [int(round(self.pad * max(tensors[i].shape[1:]))) for i in again]
            padded = [F.pad(tensors[i], (b, b, b, b), value=_GREY) for i, b in zip(again, borders)]
            for i, border, found in zip(again, borders, self._cascade(padded)):
                moved = [Face(f.box - border, f.score, f.landmarks - border) for f in found]
                # the second search's faces, and any face of the first that none of them covers
                kept = moved + [f for f in faces[i] if all(_overlap(f.box, g.box) <= 0.7 for g in moved)]
                faces[i] = sorted(kept, key=lambda f: -f.score)
        return faces

    @torch.no_grad()
    def force(self, photo: np.ndarray) -> Face:
        """The refine and output nets on the whole photo with their thresholds off: the one face that photo is
        known to hold, with the output net's probability as its score (insightface's `detect_face_force` on the
        photo's box). The box is the square about the photo's centre; what lies outside the photo is mid-grey."""
        t = self._tensor(photo)
        height, width = t.shape[1:]
        border = max(height, width)  # room for the square box and the nets' moves of it
        padded = F.pad(t, (border, border, border, border), value=_GREY)
        box = torch.tensor([[border, border, border + width - 1, border + height - 1, 1.0]], device=self.device)
        owner = torch.zeros(1, dtype=torch.long, device=self.device)
        boxes, owner = self._refine([padded], _square(box), owner, -1.0)
        boxes, landmarks, owner = self._locate_landmarks([padded], boxes, owner, -1.0)
        return Face((boxes[0, :4] - border).cpu().numpy().astype(np.float64), float(boxes[0, 4]),
                    (landmarks[0] - border).cpu().numpy().astype(np.float64))

    def _cascade(self, tensors: Sequence[Tensor]) -> list[list[Face]]:
        """The three stages on float [3, H, W] photos."""
        by_size: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, t in enumerate(tensors):
            by_size[tuple(t.shape)].append(i)
        found, owners = [], []
        for indices in by_size.values():
            boxes, owner = self._propose(torch.stack([tensors[i] for i in indices]))
            found.append(boxes)
            owners.append(torch.tensor(indices, device=self.device)[owner])
        boxes, owner = torch.cat(found), torch.cat(owners)
        if len(boxes):
            boxes, owner = self._refine(tensors, boxes, owner, self.thresholds[1])
        faces: list[list[Face]] = [[] for _ in tensors]
        if not len(boxes):
            return faces
        boxes, landmarks, owner = self._locate_landmarks(tensors, boxes, owner, self.thresholds[2])
        for i in owner.unique().tolist():
            mine = (owner == i).nonzero()[:, 0]
            keep = mine[_nms_min(boxes[mine, :4], boxes[mine, 4], 0.7)]
            for box, points in zip(boxes[keep].cpu().numpy(), landmarks[keep].cpu().numpy()):
                faces[i].append(Face(box[:4].astype(np.float64), float(box[4]), points.astype(np.float64)))
        return faces


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over the smaller box (MTCNN's last-stage overlap), inclusive pixels."""
    w = min(a[2], b[2]) - max(a[0], b[0]) + 1
    h = min(a[3], b[3]) - max(a[1], b[1]) + 1
    smaller = min((a[2] - a[0] + 1) * (a[3] - a[1] + 1), (b[2] - b[0] + 1) * (b[3] - b[1] + 1))
    return float(max(w, 0) * max(h, 0) / smaller) if smaller > 0 else 0.0


def _crosses(box: np.ndarray, shape: torch.Size) -> bool:
    return bool(box[0] < 0 or box[1] < 0 or box[2] > shape[2] - 1 or box[3] > shape[1] - 1)


def _fills_photo(faces: Sequence[Face], shape: torch.Size) -> bool:
    """No face found, or the largest face's box reaching past the photo's edge: what the second search is for (a
    passer-by cut by the edge of a loose photo does not start it)."""
    return not faces or _crosses(max(faces, key=lambda f: (f.area, f.score)).box, shape)
