"""MTCNN's three networks (Zhang et al., 2016) and their released weights.

The weights are the ones the MIT-licensed `facenet-pytorch` 2.6.0 wheel ships (`facenet_pytorch/data/pnet.pt`,
`rnet.pt`, `onet.pt`, plain state_dicts converted from the authors' release). That package pins torch < 2.3, so
it is installed without its dependencies (`pip install --no-deps facenet-pytorch==2.6.0`, done by
`make install`) and only its three data files are read: found on disk, checked against their SHA-256, loaded
with `weights_only=True`. Nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import Tensor, nn

from elasticface.utils.checksum import file_sha256
from elasticface.utils.errors import BadValue, MissingPath

WEIGHT_FILES = {
    "pnet": ("pnet.pt", "a2a71925e0b9996a42f63e47efc1ca19043e69558b5c523b978d611dfae49c8f"),
    "rnet": ("rnet.pt", "bbb937de72efc9ef83b186c49f5f558467a1d7e3453a8ece0d71a886633f6a86"),
    "onet": ("onet.pt", "165bfbe42940416ccfb977545cf0e976d5bf321f67083ae2aaaa5c764280118d"),
}
INSTALL_HINT = "pip install --no-deps facenet-pytorch==2.6.0  (or `make install`)"


class PNet(nn.Module):
    """Proposal net: fully convolutional, 12x12 window, stride 2; face probability and box offsets per cell."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
        self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, 1)
        self.conv4_2 = nn.Conv2d(32, 4, 1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """[B, 3, H, W] -> (offsets [B, 4, h, w], face probability [B, h, w])."""
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), dim=1)[:, 1]


def _flatten_transposed(x: Tensor) -> Tensor:
    """The dense layers were converted from a (W, H, C)-ordered framework: flatten in that order."""
    return x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)


class RNet(nn.Module):
    """Refine net: a 24x24 crop -> face probability and box offsets."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """[N, 3, 24, 24] -> (offsets [N, 4], face probability [N])."""
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu4(self.dense4(_flatten_transposed(self.prelu3(self.conv3(x)))))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)[:, 1]


class ONet(nn.Module):
    """Output net: a 48x48 crop -> face probability, box offsets and 5 landmarks (x1..x5, y1..y5 in [0, 1])."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """[N, 3, 48, 48] -> (offsets [N, 4], landmarks [N, 10], face probability [N])."""
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu5(self.dense5(_flatten_transposed(self.prelu4(self.conv4(x)))))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)[:, 1]


def default_weights_dir() -> str | None:
    """`facenet_pytorch/data` of the installed wheel, found without importing the package (it needs old torch)."""
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def load_mtcnn(weights_dir: str | None = None) -> tuple[PNet, RNet, ONet]:
    """The three nets with facenet-pytorch 2.6.0's weights from `weights_dir` (default: the installed wheel's
    data folder), each file's SHA-256 checked first; in eval mode."""
    folder = weights_dir or default_weights_dir()
    if folder is None:
        raise MissingPath(f"MTCNN weights not found: the detector reads facenet-pytorch 2.6.0's pnet.pt, rnet.pt "
                                f"and onet.pt; install them with: {INSTALL_HINT}")
    nets: list[nn.Module] = []
    for (name, (filename, sha256)), net in zip(WEIGHT_FILES.items(), (PNet(), RNet(), ONet())):
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            raise MissingPath(f"MTCNN weights: {path} not found; install them with: {INSTALL_HINT}")
        if file_sha256(path) != sha256:
            raise BadValue(f"MTCNN weights: {path} is not facenet-pytorch 2.6.0's {filename} (SHA-256 differs); "
                             f"reinstall with: {INSTALL_HINT}")
        state = torch.load(path, map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
        nets.append(net.eval())
    return nets[0], nets[1], nets[2]  # type: ignore[return-value]
