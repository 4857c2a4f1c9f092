"""Batch transforms applied on the device after transfer: uint8 travels, floats are made where they are used.

The paper's only augmentation is a random horizontal flip; pixels go to [-1, 1] as (x/255 - 0.5)/0.5.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from elasticface.utils.errors import BadValue


def normalize(images: Tensor) -> Tensor:
    """uint8 [B, 3, H, W] -> float32 (x/255 - 0.5)/0.5 in [-1, 1]."""
    if images.dtype != torch.uint8:
        raise TypeError(f"normalize expects uint8 images, got {images.dtype}")
    return images.float().div_(127.5).sub_(1.0)


def resize(images: Tensor, size: int) -> Tensor:
    """float [B, 3, H, W] -> [B, 3, size, size], antialiased bilinear; a no-op at that size already.

    Lets a CPU run train on smaller faces (the toy example) without re-rendering or re-encoding the data.
    """
    if images.shape[-2:] == (size, size):
        return images
    return F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)


def random_hflip(images: Tensor, p: float = 0.5, generator: torch.Generator | None = None) -> Tensor:
    """Flip each image of the batch horizontally with probability p (one draw per image)."""
    flip = (
        torch.rand(images.shape[0], generator=generator).lt(p).to(images.device, non_blocking=True)
    )  # no wait for the device
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


class BatchAugment:
    """Optional augmentations beyond the paper's flip, on the normalised batch, per image, on the device.

    All default to off (the paper trains with the flip only). Each is one vectorised pass over the
    batch, so turning them on costs the data workers nothing.
    - `brightness`, `contrast`, `saturation`: colour-jitter strengths j; factors drawn from [1 - j, 1 + j].
    - `grayscale_p`: probability that an image becomes grey (the three channels equal).
    - `shift_px`: random translation by up to this many pixels, borders zero-padded (the align jitter).
    - `erasing_p`: probability of one random rectangle (2%-20% of the area) set to 0 (random erasing).
    - `low_res_p`: probability that an image is shrunk to s x s pixels, s drawn from `low_res_px` ([lo, hi]), and
      blown back (antialiased bilinear down, bicubic up): the low-resolution augmentation of AdaFace (Kim et al.,
      2022), for faces from surveillance cameras (elasticface.data.low_resolution makes such a domain).
    """

    def __init__(
        self,
        brightness: float = 0.0,
        contrast: float = 0.0,
        saturation: float = 0.0,
        grayscale_p: float = 0.0,
        shift_px: int = 0,
        erasing_p: float = 0.0,
        low_res_p: float = 0.0,
        low_res_px: tuple[int, int] | list[int] = (16, 32),
    ) -> None:
        for key, value in (("brightness", brightness), ("contrast", contrast), ("saturation", saturation)):
            if not 0.0 <= value < 1.0:
                raise BadValue(f"data.augment.{key}={value}: must be in [0, 1)")
        for key, value in (("grayscale_p", grayscale_p), ("erasing_p", erasing_p), ("low_res_p", low_res_p)):
            if not 0.0 <= value <= 1.0:
                raise BadValue(f"data.augment.{key}={value}: must be a probability in [0, 1]")
        if shift_px < 0:
            raise BadValue(f"data.augment.shift_px={shift_px}: must be >= 0")
        self.brightness, self.contrast, self.saturation = brightness, contrast, saturation
        self.grayscale_p, self.shift_px, self.erasing_p = grayscale_p, shift_px, erasing_p
        sizes = list(low_res_px)
        if len(sizes) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes) \
                or not 4 <= sizes[0] <= sizes[1]:
            raise BadValue(f"data.augment.low_res_px={low_res_px}: expected [lo, hi] in pixels, 4 <= lo <= hi")
        self.low_res_p, self.low_res_px = low_res_p, (sizes[0], sizes[1])

    @property
    def enabled(self) -> bool:
        return any((self.brightness, self.contrast, self.saturation, self.grayscale_p, self.shift_px, self.erasing_p,
                    self.low_res_p))

    def __call__(self, images: Tensor) -> Tensor:
        """images: float [B, 3, H, W] in [-1, 1] -> augmented, still in [-1, 1]."""
        if not self.enabled:
            return images
        b, device = images.shape[0], images.device

        def factor(strength: float) -> Tensor:
            return 1.0 + strength * (2.0 * torch.rand(b, 1, 1, 1, device=device) - 1.0)

        x = images
        if self.brightness:
            x = (x + 1.0) * factor(self.brightness) - 1.0
        if self.contrast:
            mean = x.mean(dim=(1, 2, 3), keepdim=True)
            x = (x - mean) * factor(self.contrast) + mean
        grey = 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]
        if self.saturation:
            x = (x - grey) * factor(self.saturation) + grey
        if self.grayscale_p:
            to_grey = torch.rand(b, 1, 1, 1, device=device) < self.grayscale_p
            x = torch.where(to_grey, grey.expand_as(x), x)
        if self.shift_px:
            x = self._shift(x)
        if self.erasing_p:
            x = self._erase(x)
        if self.low_res_p:
            x = self._low_resolution(x)
        return x.clamp_(-1.0, 1.0)

    def _low_resolution(self, x: Tensor) -> Tensor:
        b, _, h, w = x.shape
        lo, hi = self.low_res_px
        chosen = torch.rand(b, device=x.device) < self.low_res_p
        sizes = torch.randint(lo, hi + 1, (b,), device=x.device)
        out = x.clone()
        for size in sizes[chosen].unique().tolist():  # one resize per size drawn: at most hi - lo + 1
            rows = (chosen & (sizes == size)).nonzero().flatten()
            small = F.interpolate(x[rows], size=(size, size), mode="bilinear", antialias=True, align_corners=False)
            out[rows] = F.interpolate(small, size=(h, w), mode="bicubic", align_corners=False)
        return out

    def _shift(self, x: Tensor) -> Tensor:
        b, _, h, w = x.shape
        p = self.shift_px
        padded = torch.nn.functional.pad(x, (p, p, p, p))
        dy = torch.randint(0, 2 * p + 1, (b,), device=x.device)
        dx = torch.randint(0, 2 * p + 1, (b,), device=x.device)
        rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None].expand(b, x.shape[1], h, w + 2 * p)
        x = padded.gather(2, rows)
        cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :].expand(b, x.shape[1], h, w)
        return x.gather(3, cols)

    def _erase(self, x: Tensor) -> Tensor:
        b, _, h, w = x.shape
        device = x.device
        area = torch.empty(b, device=device).uniform_(0.02, 0.2) * h * w
        aspect = torch.exp(torch.empty(b, device=device).uniform_(-1.2, 1.2))  # log-uniform in [0.3, 3.3]
        eh = (area * aspect).sqrt().clamp(1, h)
        ew = (area / aspect).sqrt().clamp(1, w)
        top = torch.rand(b, device=device) * (h - eh)
        left = torch.rand(b, device=device) * (w - ew)
        ys = torch.arange(h, device=device)[None, :]
        xs = torch.arange(w, device=device)[None, :]
        inside = ((ys >= top[:, None]) & (ys < (top + eh)[:, None]))[:, :, None] & (
            (xs >= left[:, None]) & (xs < (left + ew)[:, None])
        )[:, None, :]
        erase = inside & (torch.rand(b, device=device) < self.erasing_p)[:, None, None]
        return x.masked_fill(erase[:, None], 0.0)
