from elasticface.utils.wandb_mode import wandb_mode


def test_offline_without_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "missing"))
    assert wandb_mode() == "offline"


def test_online_with_api_key_or_netrc(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode() == "online"
    monkeypatch.delenv("WANDB_API_KEY")
    rc = tmp_path / "netrc"
    rc.write_text("machine api.wandb.ai\n  login user\n  password " + "y" * 40 + "\n")
    rc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(rc))
    assert wandb_mode() == "online"


def test_wandb_mode_env_wins(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    modes = (("offline", "offline"), ("dryrun", "offline"), ("disabled", "disabled"), ("DISABLED", "disabled"))
    for env, expected in modes:
        monkeypatch.setenv("WANDB_MODE", env)
        assert wandb_mode() == expected, env
