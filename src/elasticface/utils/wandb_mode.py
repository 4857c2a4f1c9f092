"""W&B runs offline unless the user has credentials: a run must never block waiting for the network."""

from __future__ import annotations

import netrc
import os
from pathlib import Path


def wandb_offline() -> bool:
    """True unless WANDB_MODE asks for online, or an API key is set (env var or ~/.netrc from `wandb login`)."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return False
    netrc_path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return netrc.netrc(netrc_path).authenticators("api.wandb.ai") is None
    except (FileNotFoundError, netrc.NetrcParseError, PermissionError):
        return True
