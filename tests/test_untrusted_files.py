"""Files from strangers run no code: every way a file gets in refuses a crafted one, names it, and leaves no marker.

Each payload would create a marker file if it ran (`builtins.open(marker, "w")` on unpickling, or a checkpoint's
hyperparameters asking Hydra to build `torch.load(weights_only=False)` of such a pickle). The payloads are built
here with `pickle`, `struct` and `zlib`, independently of the loaders' code; every test asserts the marker is
absent, not only that an error was raised.
"""

from __future__ import annotations

import http.server
import io
import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers.exit_status import refused_line
from helpers.images import png_declaring
import torch

from conftest import ROOT, TINY, compose_eval

# ------------------------------------------------------------------------------------------------ payloads


class _Payload:
    """Unpickling this calls builtins.open(marker, "w"): harmless, and visible as a new empty file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def payload_pickle(marker: Path, protocol: int = pickle.HIGHEST_PROTOCOL) -> bytes:
    return pickle.dumps(_Payload(marker), protocol=protocol)


def pickle_checkpoint(path: Path, marker: Path) -> Path:
    """A Lightning-looking checkpoint whose pickle itself runs the payload (fails weights_only loading)."""
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": {"w": torch.zeros(2)}, "epoch": 0,
                "global_step": 1, "hyper_parameters": {"note": _Payload(marker)}}, path)
    return path


def hparams_checkpoint(path: Path, marker: Path, **extra) -> Path:
    """A checkpoint that passes torch.load(weights_only=True) but whose saved hyperparameters ask Hydra to build
    `torch.load(io.BytesIO(<payload pickle>), weights_only=False)` as the backbone (the issue's reproduction)."""
    evil = {"_target_": "torch.load", "f": {"_target_": "io.BytesIO", "initial_bytes": payload_pickle(marker)},
            "weights_only": False}
    hparams = {"backbone": evil, "head": {"_target_": "elasticface.heads.ArcFace"},
               "centers": {"_target_": "elasticface.classifier.FullFC", "_partial_": True},
               "optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}, "num_classes": 8,
               "embedding_size": 32, **extra}
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": {"w": torch.zeros(2)}, "epoch": 0,
                "global_step": 1, "hyper_parameters": hparams}, path)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class _Server:
    """A local HTTP server on 127.0.0.1 serving `body` at every path, counting requests; shut down on exit."""

    def __init__(self, body: bytes) -> None:
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server API
                server.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.timeout = 5
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "_Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "1"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


# ------------------------------------------------------------------------------- checkpoints and weights


def test_load_from_checkpoint_refuses_a_target_outside_the_allowlist(tmp_path):
    from elasticface.module import FaceRecognitionModule
    from elasticface.untrusted import UntrustedFileError

    marker = tmp_path / "marker"
    ckpt = hparams_checkpoint(tmp_path / "evil.ckpt", marker)
    with pytest.raises(UntrustedFileError, match=r"evil\.ckpt \(hyper_parameters\): backbone\._target_: "
                                                 r"target 'torch\.load' is not allowed"):
        FaceRecognitionModule.load_from_checkpoint(str(ckpt))
    assert not marker.exists()


@pytest.mark.parametrize("node, where", [
    ({"_target_": "elasticface.backbones.build_backbone", "name": "iresnet18",
      "x": {"_target_": "os.system", "_args_": ["true"]}}, r"backbone\.x\._target_: target 'os\.system'"),
    ({"_target_": "elasticface.backbones.build_backbone", "name": "iresnet18",
      "x": {"_target_": "functools.partial", "_args_": [{"_target_": "builtins.open"}]}},
     r"backbone\.x\._target_: target 'functools\.partial'"),
    ({"_target_": "elasticface.backbones.build_backbone", "name": "hf-hub:someone/model"},
     r"backbone\.name: 'hf-hub:someone/model' is not a model in timm's registry"),
    ({"_target_": "elasticface.backbones.build_backbone", "name": "resnet18", "pretrained": True},
     r"backbone\.pretrained: True: timm would download"),
    ({"_target_": "elasticface.backbones.build_backbone", "name": "resnet18", "checkpoint_path": "/x.pth"},
     r"backbone\.checkpoint_path"),
    ({"_target_": "elasticface.backbones.build_backbone", "name": "iresnet18", "dropout": "${oc.env:HOME}"},
     r"backbone\.dropout: .*is an interpolation"),
    ({"_target_": "elasticface.backbones.build_backbone", "name": "iresnet18", "_target_whitelist_": ["os"]},
     r"backbone\._target_whitelist_: an instantiate option"),
])
def test_nested_targets_args_and_timm_downloads_are_checked(node, where):
    from elasticface.untrusted import UntrustedFileError, check_targets

    with pytest.raises(UntrustedFileError, match=rf"^x\.ckpt: {where}"):
        check_targets({"backbone": node}, "x.ckpt")


def test_what_this_project_writes_is_allowed_and_loads_as_data(tmp_path):
    """The targets every head, backbone, class layer, optimizer and scheduler option writes pass the check,
    named in any of the ways the package exports them; a real trained checkpoint loads and embeds."""
    from conftest import compose_train

    from elasticface.heads.registry import head_names
    from elasticface.untrusted import allowed_targets, check_targets

    for head in head_names():
        for extra in (["model=model_parallel", "optimizer=adamw", "scheduler=cosine"], ["scheduler=poly"]):
            cfg = compose_train([*TINY, f"head={head}", *extra], tmp_path)
            from omegaconf import OmegaConf

            model = OmegaConf.to_container(cfg.model, resolve=True)
            model.pop("_target_")
            check_targets(model, f"head={head}")
    # the names the objects are defined under, too (a registry or re-export may move)
    for name in ("elasticface.heads.elastic.ElasticArcFace", "elasticface.classifier.sharded.ShardedFC",
                 "elasticface.backbones.build.build_backbone", "torch.optim.lr_scheduler.MultiStepLR",
                 "torch.optim.sgd.SGD", "elasticface.schedulers.multistep", "elasticface.heads.SubCenter"):
        assert name in allowed_targets(), name
    for name in ("torch.load", "builtins.eval", "os.system", "subprocess.run", "hydra.utils.instantiate",
                 "elasticface.untrusted.build_from_checkpoint", "torch.hub.load", "pickle.loads"):
        assert name not in allowed_targets(), name


def test_every_checkpoint_read_is_weights_only_and_local(tmp_path, monkeypatch):
    """The reader the Trainer restores through (ckpt_path=, resume=auto, a requeued job's `hpc` checkpoint)."""
    from elasticface.checkpointing.atomic_save import AtomicCheckpointIO
    from elasticface.untrusted import UntrustedFileError
    from elasticface.utils.remote import RemoteFileError

    marker = tmp_path / "marker"
    ckpt = pickle_checkpoint(tmp_path / "evil.ckpt", marker)
    for weights_only in (None, False):  # whatever Lightning asks for
        with pytest.raises(UntrustedFileError, match=rf"{ckpt}: holds pickled Python objects .*refused unopened"):
            AtomicCheckpointIO().load_checkpoint(ckpt, weights_only=weights_only)
    with _Server(ckpt.read_bytes()) as server:
        with pytest.raises(RemoteFileError, match=rf"checkpoint={server.url}/x\.ckpt: a remote file is not opened"):
            AtomicCheckpointIO().load_checkpoint(f"{server.url}/x.ckpt")
        assert server.requests == 0
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["plain", "model_parallel", "preempted"])
def test_saved_checkpoints_of_each_kind_resume_with_weights_only_loading(tiny_cfg, tmp_path, monkeypatch, kind):
    """What a run saves (optimizer, scheduler, loops, RNG, sampler position, callback states, sharded centres)
    loads with weights_only=True: each kind is resumed by the Trainer, and every torch.load it makes is safe.
    plain: last.ckpt of a finished epoch; preempted: the checkpoint the preemption signal writes at step 2, mid-epoch
    (the loader's position included); model_parallel: sharded centres with their optimizer state."""
    from elasticface.checkpointing.preemption import Preemption
    from elasticface.training import run

    extra = ["model=model_parallel"] if kind == "model_parallel" else []
    if kind == "preempted":
        original = Preemption.on_train_batch_end

        def signal_at_step_2(self, trainer, *args):
            self.requested = self.requested or trainer.global_step >= 2
            return original(self, trainer, *args)

        monkeypatch.setattr(Preemption, "on_train_batch_end", signal_at_step_2)
    first = run(tiny_cfg("trainer.max_epochs=1", *extra))
    monkeypatch.undo()
    ckpts = tmp_path / "checkpoints"
    if kind == "preempted":
        assert first["preempted"] and first["global_step"] == 2
    starts = [ckpts / "last.ckpt"]
    if kind == "model_parallel":
        assert "class_centres" in torch.load(starts[0], weights_only=True)

    real_load = torch.load
    for start in starts:
        calls: list[object] = []

        def recording_load(*args, **kwargs):
            calls.append(kwargs.get("weights_only"))
            return real_load(*args, **kwargs)

        monkeypatch.setattr(torch, "load", recording_load)
        steps = real_load(start, weights_only=True)["global_step"]
        resumed = run(tiny_cfg("trainer.max_epochs=2", f"ckpt_path={start}", *extra))
        monkeypatch.undo()
        assert calls and all(c is True for c in calls), calls
        assert resumed["global_step"] == 6 > steps  # 3 steps per epoch: continued to the end of the second


# ------------------------------------------------------------------------------------------- the commands


def test_train_refuses_crafted_ckpt_path_and_weights_and_changes_nothing(tiny_cfg, tmp_path):
    """`python train.py ckpt_path=<file>` as typed, and `weights=<file>` in-process: refused naming the file, no
    marker, the run directory that holds the file unchanged, and no checkpoint or summary from the refused run."""
    from elasticface.backbones.weights import WeightsError
    from elasticface.training import run

    marker = tmp_path / "marker"
    old_run = tmp_path / "old_run"
    (old_run / "checkpoints").mkdir(parents=True)
    ckpt = pickle_checkpoint(old_run / "checkpoints" / "last.ckpt", marker)
    (old_run / "summary.txt").write_text("kept")
    before = snapshot(old_run)
    new_run = tmp_path / "new_run"
    out = _run([sys.executable, str(ROOT / "train.py"), *TINY, f"ckpt_path={ckpt}", f"hydra.run.dir={new_run}"],
               tmp_path)
    assert out.returncode != 0
    assert f"{ckpt}: holds pickled Python objects (io.open)" in out.stderr, out.stderr[-2000:]
    assert not marker.exists()
    assert not (new_run / "checkpoints").exists() and not (new_run / "summary.json").exists()
    assert snapshot(old_run) == before

    weights = tmp_path / "backbone.pth"
    torch.save({"conv1.weight": _Payload(marker)}, weights)
    with pytest.raises(WeightsError, match=rf"{weights}: holds a pickled Python object \(io.open\)"):
        run(tiny_cfg(f"weights={weights}"))
    assert not marker.exists()
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "summary.json").exists()


def test_train_refuses_a_remote_ckpt_path_before_fetching_it(tiny_cfg, tmp_path):
    from elasticface.training import run
    from elasticface.utils.remote import RemoteFileError

    marker = tmp_path / "marker"
    body = pickle_checkpoint(tmp_path / "evil.ckpt", marker).read_bytes()
    with _Server(body) as server:
        for option in ("ckpt_path", "weights"):
            url = f"{server.url}/last.ckpt"
            with pytest.raises(RemoteFileError, match=rf"{option}={url}: a remote file is not opened"):
                run(tiny_cfg(f"{option}={url}"))
        assert server.requests == 0
    assert not marker.exists()
    assert not (tmp_path / "checkpoints").exists()


def test_eval_refuses_a_checkpoint_whose_hyperparameters_name_code(tmp_path):
    marker = tmp_path / "marker"
    ckpt = hparams_checkpoint(tmp_path / "evil.ckpt", marker)
    (tmp_path / "bins").mkdir()
    (tmp_path / "bins" / "lfw.bin").write_bytes(b"\x80\x04")  # a .bin set's first bytes: the checks pass it
    out = _run([sys.executable, str(ROOT / "eval.py"), f"weights={ckpt}", f"data.val_root={tmp_path / 'bins'}",
                f"hydra.run.dir={tmp_path / 'eval'}"], tmp_path)
    assert out.returncode == 2  # a user's mistake: one line
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"{ckpt} (hyper_parameters): backbone._target_: target 'torch.load' is not allowed" in out.stderr
    assert not marker.exists()
    assert not (tmp_path / "eval" / "results.json").exists()


def test_embed_and_export_refuse_crafted_checkpoints(tmp_path, capsys):
    """In-process for both commands and both payloads; through `python -m` once each."""
    from elasticface.cli.embed import main as embed_main
    from elasticface.cli.export import main as export_main

    marker = tmp_path / "marker"
    faces = tmp_path / "faces"
    faces.mkdir()
    from PIL import Image

    Image.new("RGB", (112, 112)).save(faces / "a.jpg")
    hparams = hparams_checkpoint(tmp_path / "hparams.ckpt", marker)
    pickled = pickle_checkpoint(tmp_path / "pickled.ckpt", marker)
    for ckpt in (hparams, pickled):
        assert str(ckpt) in refused_line(embed_main, ["--weights", str(ckpt), "--images", str(faces), "--out",
                                                      str(tmp_path / "e.npy"), "--device", "cpu"], capsys)
        assert str(ckpt) in refused_line(export_main, ["--weights", str(ckpt), "--out", str(tmp_path / "m.onnx")],
                                         capsys)
    for module, args in (("elasticface.cli.embed", ["--images", str(faces), "--out", str(tmp_path / "e.npy")]),
                         ("elasticface.cli.export", ["--out", str(tmp_path / "m.onnx")])):
        out = _run([sys.executable, "-m", module, "--weights", str(hparams), *args], tmp_path)
        assert out.returncode != 0 and "target 'torch.load' is not allowed" in out.stderr, out.stderr[-2000:]
    assert not marker.exists()
    assert not (tmp_path / "e.npy").exists() and not (tmp_path / "m.onnx").exists()


def test_torchscript_needs_the_explicit_option(tmp_path, monkeypatch, capsys):
    from elasticface.cli.embed import main as embed_main
    from elasticface.eval.embed import TorchScriptRefused, load_model_file

    ts = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(torch.nn.Flatten()), str(ts))
    loads: list[str] = []
    real = torch.jit.load
    monkeypatch.setattr(torch.jit, "load", lambda *a, **k: loads.append(str(a[0])) or real(*a, **k))
    with pytest.raises(TorchScriptRefused, match=rf"{ts}: a TorchScript file, which is a program.*"
                                                 r"allow_torchscript=true \(--allow-torchscript\)"):
        load_model_file(str(ts), "cpu")
    faces = tmp_path / "faces"
    faces.mkdir()
    from PIL import Image

    Image.new("RGB", (112, 112)).save(faces / "a.jpg")
    assert "--allow-torchscript" in refused_line(
        embed_main, ["--weights", str(ts), "--images", str(faces), "--out", str(tmp_path / "e.npy"), "--device", "cpu"],
        capsys)
    assert loads == [] and not (tmp_path / "e.npy").exists()
    assert load_model_file(str(ts), "cpu", allow_torchscript=True) is not None and loads == [str(ts)]

    from elasticface.eval.run import evaluate

    cfg = compose_eval([f"weights={ts}", f"data.val_root={tmp_path}", "device=cpu"])
    with pytest.raises(TorchScriptRefused, match="allow_torchscript=true"):
        evaluate(cfg, output_dir=str(tmp_path / "eval"))
    assert loads == [str(ts)] and not (tmp_path / "eval" / "results.json").exists()


# ----------------------------------------------------------------------------------------- data files


@pytest.mark.parametrize("protocol", range(0, 6))
def test_bin_reader_refuses_pickled_code_in_every_protocol(tmp_path, protocol):
    from elasticface.data.pair_files import load_bin

    marker = tmp_path / "marker"
    path = tmp_path / "lfw.bin"
    path.write_bytes(pickle.dumps(([_Payload(marker), b"\xff\xd8"], [True]), protocol=protocol))
    with pytest.raises(Exception, match=str(path)):
        load_bin(str(path))
    assert not marker.exists()


def _jpeg_declaring(width: int, height: int) -> bytes:
    """A real 16x16 JPEG whose frame header (SOF0) is patched to declare width x height: decoding it would
    allocate width * height * 3 bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 120, 150)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


@pytest.mark.parametrize("make", [_jpeg_declaring, png_declaring])
def test_decompression_bombs_are_refused_before_decoding(make, monkeypatch):
    from PIL import Image

    from elasticface.data.decode import ImageTooLargeError, decode_image

    bomb = make(8000, 8000)  # 64 Mpx: 192 MB decoded, under Pillow's own 89 Mpx warning
    small = make(16, 16)
    decoded: list[int] = []
    import torchvision.io

    real_jpeg, real_load = torchvision.io.decode_jpeg, Image.Image.load
    monkeypatch.setattr(torchvision.io, "decode_jpeg", lambda *a, **k: decoded.append(1) or real_jpeg(*a, **k))
    monkeypatch.setattr(Image.Image, "load", lambda self: decoded.append(2) or real_load(self))
    for decoder in ("torchvision", "pil"):
        with pytest.raises(ImageTooLargeError, match=r"declares 8000x8000 = 64,000,000 pixels, more than "
                                                     r"max_pixels=16,777,216"):
            decode_image(bomb, decoder)
    assert decoded == []
    with pytest.raises(ImageTooLargeError, match="max_pixels=100"):
        decode_image(small, max_pixels=100)  # the limit is the caller's


def test_truncated_and_non_image_bytes_are_corrupt():
    from PIL import Image

    from elasticface.data.decode import CorruptImageError, decode_image

    buf = io.BytesIO()
    Image.effect_noise((112, 112), 60).convert("RGB").save(buf, format="JPEG")
    for data in (buf.getvalue()[: len(buf.getvalue()) // 2], b"not an image at all", b"\xff\xd8\xff"):
        with pytest.raises(CorruptImageError):
            decode_image(data)


def test_recordio_and_folder_skip_and_count_a_bomb(tmp_path):
    from helpers.images import smooth_jpeg
    from helpers.recordio_files import ifqq, whole, write_files

    from elasticface.data.faults import DroppedRecord
    from elasticface.data.folder import ImageFolderFaces
    from elasticface.data.recordio_dataset import RecordIODataset

    bomb = _jpeg_declaring(30000, 30000)
    write_files(tmp_path / "rec", [(k, whole(ifqq(0, float(k % 2), k) + (bomb if k == 3 else smooth_jpeg(k))))
                                   for k in range(6)], "2,112,112\n")
    rec = RecordIODataset(str(tmp_path / "rec"))
    items = [rec[i] for i in range(len(rec))]
    dropped = [i for i in items if isinstance(i, DroppedRecord)]
    assert len(dropped) == 1 and rec.corrupt_keys == [3] and "declares 30000x30000" in dropped[0].reason
    for label in (0, 1):
        (tmp_path / "faces" / f"id{label}").mkdir(parents=True)
        (tmp_path / "faces" / f"id{label}" / "a.jpg").write_bytes(smooth_jpeg(label))
    (tmp_path / "faces" / "id1" / "bomb.png").write_bytes(png_declaring(30000, 30000))
    folder = ImageFolderFaces(str(tmp_path / "faces"))
    items = [folder[i] for i in range(len(folder))]
    assert sum(isinstance(i, DroppedRecord) for i in items) == 1 and folder.num_corrupt == 1
    assert folder.corrupt_paths[0].endswith("bomb.png")


def test_embed_and_the_converter_name_the_bomb(tmp_path, capsys):
    from elasticface.cli.embed import main as embed_main
    from elasticface.data.convert import pairs_to_bin, write_recordio
    from elasticface.data.decode import ImageTooLargeError
    from elasticface.export import export_onnx

    faces = tmp_path / "faces" / "id0"
    faces.mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (112, 112)).save(faces / "a.jpg")
    (faces / "b.jpg").write_bytes(_jpeg_declaring(20000, 20000))
    model = tmp_path / "m.onnx"
    export_onnx(torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()), str(model))
    assert f"{faces / 'b.jpg'}: declares 20000x20000" in refused_line(
        embed_main, ["--weights", str(model), "--images", str(tmp_path / "faces"), "--out", str(tmp_path / "e.npy"),
                     "--device", "cpu"], capsys)
    assert not (tmp_path / "e.npy").exists()
    stats = write_recordio(str(tmp_path / "faces"), str(tmp_path / "rec"))
    assert stats["images"] == 1  # the bomb skipped, with a warning naming it
    (tmp_path / "pairs.txt").write_text("id0/a.jpg id0/b.jpg 1\n")
    with pytest.raises(ImageTooLargeError, match=r"b\.jpg: declares 20000x20000"):
        pairs_to_bin(str(tmp_path / "pairs.txt"), str(tmp_path / "faces"), str(tmp_path / "x.bin"))
    assert not (tmp_path / "x.bin").exists()


# ---------------------------------------------------------------------------------------------- floors


def test_dependency_floors_keep_the_safe_defaults():
    """torch 2.6 made weights_only=True torch.load's default; hydra-core 1.3.4 is the first release with
    instantiate's target blocklist; Lightning 2.6 is the release whose checkpoint reading was checked."""
    import re
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for dep in deps:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", dep.split(";")[0].strip())
        if found:
            floors[found.group(1).lower()] = tuple(int(x) for x in found.group(2).split("."))
    needed = {"torch": (2, 6), "torchvision": (0, 21), "hydra-core": (1, 3, 4), "pytorch-lightning": (2, 6)}
    for name, floor in needed.items():
        assert name in floors, f"pyproject.toml has no '{name}>=' floor"
        assert floors[name] >= floor, f"{name}>={'.'.join(map(str, floors[name]))} is below {floor}"
