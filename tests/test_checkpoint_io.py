import pytest
import torch

from elasticface.checkpointing.atomic_save import AtomicCheckpointIO


def test_atomic_save_round_trips(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "ckpts" / "last.ckpt"
    io.save_checkpoint({"step": 3, "w": torch.arange(4)}, path)
    loaded = io.load_checkpoint(path)
    assert loaded["step"] == 3 and torch.equal(loaded["w"], torch.arange(4))
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary left behind
    assert path.stat().st_mode & 0o044, "readable by group/others like any file torch.save writes"


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
