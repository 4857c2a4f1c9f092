from elasticface.utils.wandb_mode import wandb_offline


def test_offline_without_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "missing"))
    assert wandb_offline() is True


def test_online_with_api_key_or_netrc(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_offline() is False
    monkeypatch.delenv("WANDB_API_KEY")
    rc = tmp_path / "netrc"
    rc.write_text("machine api.wandb.ai\n  login user\n  password " + "y" * 40 + "\n")
    rc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(rc))
    assert wandb_offline() is False


def test_wandb_mode_offline_wins(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_offline() is True
