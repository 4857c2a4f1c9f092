"""W&B runs offline unless the user has credentials for the server W&B will talk to: a run must never block
waiting for the network, and a self-hosted server must not silently get an offline run.

The server is W&B's own choice, read the way wandb reads it: `WANDB_BASE_URL`, else `base_url` in the
workspace settings (`./wandb/settings`), else in the global ones (`$WANDB_CONFIG_DIR/settings`, by default
`~/.config/wandb/settings`, which `wandb login --host URL` writes), else https://api.wandb.ai. The key is
`WANDB_API_KEY` or the netrc entry for that server's host (`$NETRC`, by default `~/.netrc`).
"""

from __future__ import annotations

import configparser
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PUBLIC_URL = "https://api.wandb.ai"


@dataclass(frozen=True)
class WandbChoice:
    """The mode a run gets, the server it would talk to, and why (printed when the logger starts)."""

    mode: str
    base_url: str
    reason: str

    def describe(self) -> str:
        where = f" at {self.base_url}" if self.mode == "online" else ""
        after = "; upload later with `wandb sync <run dir>/wandb`" if self.mode == "offline" else ""
        return f"W&B {self.mode}{where} ({self.reason}){after}"


def _settings_files() -> list[Path]:
    """The settings files wandb reads, highest precedence first."""
    config_dir = Path(os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb")
    return [Path.cwd() / "wandb" / "settings", config_dir / "settings"]


def _setting(key: str) -> tuple[str, str] | None:
    """(value, file) of `key` in the first settings file that sets it."""
    for path in _settings_files():
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except (configparser.Error, OSError):
            continue
        value = parser.get("default", key, fallback="").strip()
        if value:
            return value, str(path)
    return None


def base_url() -> tuple[str, str]:
    """(the W&B server URL, where it was configured)."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"].rstrip("/"), "WANDB_BASE_URL"
    found = _setting("base_url")
    if found:
        return found[0].rstrip("/"), found[1]
    return PUBLIC_URL, "the default"


def _netrc_key(url: str) -> str | None:
    """The netrc file holding a key for `url`'s host, or None."""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    host = urlsplit(url).netloc
    try:
        entry = netrc.netrc(path).authenticators(host) if host else None
    except (FileNotFoundError, netrc.NetrcParseError, PermissionError, OSError):
        return None
    return str(path) if entry and entry[2] else None


def wandb_choice() -> WandbChoice:
    """WANDB_MODE when set ("disabled" writes nothing), else a `mode` in the settings files (`wandb offline`
    writes one), else "online" with an API key for the configured server, else "offline"."""
    url, url_source = base_url()
    env = os.environ.get("WANDB_MODE", "").lower()
    setting = _setting("mode")
    mode, source = (env, "WANDB_MODE") if env else ((setting[0].lower(), setting[1]) if setting else ("", ""))
    if mode == "disabled":
        return WandbChoice("disabled", url, f"{source}=disabled")
    if mode in ("offline", "dryrun"):
        return WandbChoice("offline", url, f"{source}={mode}")
    if mode in ("online", "run"):
        return WandbChoice("online", url, f"{source}={mode}")
    server = f"{url} (from {url_source})"
    if os.environ.get("WANDB_API_KEY"):
        return WandbChoice("online", url, f"WANDB_API_KEY set; server {server}")
    netrc_file = _netrc_key(url)
    if netrc_file:
        return WandbChoice("online", url, f"API key for {urlsplit(url).netloc} in {netrc_file}; server {server}")
    return WandbChoice("offline", url, f"no API key for {server}: neither WANDB_API_KEY nor a netrc entry for "
                                       f"{urlsplit(url).netloc}; `wandb login --host {url}` sets one")


def wandb_mode() -> str:
    """The `mode` for wandb.init (the `${wandb_mode:}` resolver).

    Passed explicitly because Lightning's WandbLogger(offline=True) overwrites WANDB_MODE with "dryrun",
    which turned `WANDB_MODE=disabled` into an offline run on disk.
    """
    return wandb_choice().mode
