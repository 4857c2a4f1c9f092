"""W&B runs offline unless the user has credentials: a run must never block waiting for the network."""

from __future__ import annotations

import netrc
import os
from pathlib import Path


def wandb_mode() -> str:
    """The `mode` for wandb.init: WANDB_MODE when set ("disabled" writes nothing), else "online" with an API
    key (env var or ~/.netrc from `wandb login`), else "offline".

    Passed explicitly because Lightning's WandbLogger(offline=True) overwrites WANDB_MODE with "dryrun",
    which turned `WANDB_MODE=disabled` into an offline run on disk.
    """
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode == "disabled":
        return "disabled"
    if mode in ("offline", "dryrun"):
        return "offline"
    if mode in ("online", "run"):
        return "online"
    return "online" if _has_credentials() else "offline"


def _has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc_path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return netrc.netrc(netrc_path).authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, PermissionError):
        return False
