"""Which W&B mode a run gets: online only with a key for the server wandb will talk to (public or self-hosted)."""

from __future__ import annotations

import logging

import pytest

from elasticface.utils.wandb_mode import wandb_choice, wandb_mode

KEY = "y" * 40


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No W&B environment, settings or netrc of the machine running the tests."""
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.chdir(tmp_path)


def _netrc(tmp_path, host: str) -> None:
    rc = tmp_path / "netrc"
    rc.write_text(f"machine {host}\n  login user\n  password {KEY}\n")
    rc.chmod(0o600)


def _settings(path, **values: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[default]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))


def test_offline_without_credentials():
    assert wandb_mode() == "offline"
    assert "no API key for https://api.wandb.ai" in wandb_choice().describe()


def test_online_with_api_key_or_netrc(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode() == "online"
    monkeypatch.delenv("WANDB_API_KEY")
    _netrc(tmp_path, "api.wandb.ai")
    assert wandb_mode() == "online"


def test_wandb_mode_env_wins(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    modes = (("offline", "offline"), ("dryrun", "offline"), ("disabled", "disabled"), ("DISABLED", "disabled"))
    for env, expected in modes:
        monkeypatch.setenv("WANDB_MODE", env)
        assert wandb_mode() == expected, env


def test_self_hosted_server_from_the_environment_uses_its_netrc_entry(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.lab.example:8443/")
    _netrc(tmp_path, "api.wandb.ai")  # a key for the public host only: not for this server
    assert wandb_mode() == "offline"
    assert "wandb.lab.example:8443" in wandb_choice().reason
    _netrc(tmp_path, "wandb.lab.example:8443")  # what `wandb login --host` writes: the URL's host[:port]
    choice = wandb_choice()
    assert (choice.mode, choice.base_url) == ("online", "https://wandb.lab.example:8443")
    assert "online at https://wandb.lab.example:8443" in choice.describe()


@pytest.mark.parametrize("where", ["global", "workspace"])
def test_self_hosted_server_from_wandb_login_host_settings(where, tmp_path):
    path = tmp_path / "config" / "settings" if where == "global" else tmp_path / "wandb" / "settings"
    _settings(path, base_url="https://wandb.lab.example")
    assert wandb_choice().base_url == "https://wandb.lab.example"
    assert wandb_mode() == "offline"
    _netrc(tmp_path, "wandb.lab.example")
    assert wandb_mode() == "online"
    assert str(path) in wandb_choice().reason


def test_wandb_offline_setting_is_honoured(tmp_path):
    _netrc(tmp_path, "api.wandb.ai")
    _settings(tmp_path / "config" / "settings", mode="offline")  # what `wandb offline` writes
    assert wandb_mode() == "offline"


def test_the_logger_says_which_mode_it_chose(tmp_path, caplog):
    from elasticface.loggers.wandb_logger import WandbLogger

    with caplog.at_level(logging.INFO):
        WandbLogger(save_dir=str(tmp_path), project="p", mode=wandb_mode())
        WandbLogger(save_dir=str(tmp_path), project="p", mode="disabled")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B ")]
    assert lines[0].startswith("W&B offline (no API key for https://api.wandb.ai"), lines
    assert lines[1].startswith("W&B disabled (logger.wandb.mode=disabled in the config"), lines
