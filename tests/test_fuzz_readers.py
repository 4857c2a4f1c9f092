"""Files from strangers, fuzzed: every reader of the project on mutated, truncated and extended real-layout files.

Each property builds small valid files in a reader's real layout (with the project's own writer where there is one,
else with an independent writer here), mutates one of them (bit flips, byte replacements, integers of interesting
sizes written over length fields, truncation at any offset, appended, inserted, deleted and duplicated bytes; for
text formats also deleted, duplicated, swapped, split and joined lines and fields replaced by hostile tokens; for
JSON also values replaced, deleted or duplicated anywhere in the document) and calls the reader the commands call.
The reader may return normally (a mutation can still give a valid file) or raise the project's own error,
`BadFile` (or `MissingPath` where the file names a file that is not there), with the file named in its message;
any other exception fails the property, and so does a case that runs longer than `FUZZ_CASE_SECONDS` (a hang).

The targeted tests at the end give length fields that claim gigabytes and assert the readers refuse them quickly
without allocating what the field says, and plant an image outside a MegaFace testpack that a list entry points
at: the entry is refused and the image never opened.

`FUZZ_EXAMPLES` (default 30) sets the cases per seed file; `make fuzz` runs 100,000 and prints the cases per reader
(`FUZZ_REPORT=<folder>` makes this module write its counts there; tests/fuzz_report.py prints them).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import pickle
import re
import shutil
import signal
import struct
import time
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.io  # noqa: F401  (imported once here, not inside the first case's time limit)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from PIL import Image

from elasticface.utils.errors import BadFile, MissingPath

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))
CASE_SECONDS = float(os.environ.get("FUZZ_CASE_SECONDS", "10"))
#: no "explain" phase: it traces every line of a failing case, which is slow and not what is reported here
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck),
                phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
MXNET = Path(__file__).parent / "data" / "mxnet"
#: torch warns about each odd pickle protocol and TorchScript archive a mutation makes; the cases are what is checked
pytestmark = [pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning"),
              pytest.mark.filterwarnings("ignore:'torch.load' received a zip file:UserWarning")]

# ------------------------------------------------------------------------------------------------ bookkeeping

#: reader -> {"cases", "accepted", "refused", "failed"}; with FUZZ_REPORT=<folder>, written to
#: <folder>/cases-<pid>.json every 30 s and at the end (a long run that is stopped still says how far it got)
COUNTS: dict[str, Counter] = defaultdict(Counter)
_FLUSHED = [time.monotonic()]


def _flush_counts(every: float = 30.0) -> None:
    folder = os.environ.get("FUZZ_REPORT")
    if not folder or not COUNTS or time.monotonic() - _FLUSHED[0] < every:
        return
    _FLUSHED[0] = time.monotonic()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"cases-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"examples": EXAMPLES, "counts": {k: dict(v) for k, v in COUNTS.items()}}, f, indent=1)
    os.replace(path + ".tmp", path)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    _flush_counts(every=0)


class Hang(BaseException):
    """A case ran past its time (a BaseException: a reader's `except Exception` cannot turn it into a BadFile)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def fire(signum, frame):
        raise Hang(f"the reader is still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if time.monotonic() - start > seconds:  # a C loop that the alarm could not interrupt
        raise Hang(f"the reader took {time.monotonic() - start:.1f} s (limit {seconds} s)")


def run_case(reader: str, names: Sequence[str | os.PathLike], call: Callable[[], object]) -> str:
    """Call the reader on a mutated file: a normal return, or BadFile / MissingPath naming one of `names`."""
    COUNTS[reader]["cases"] += 1
    try:
        with deadline(CASE_SECONDS):
            try:
                call()
            except (BadFile, MissingPath) as err:
                message = str(err)
                assert any(str(n) in message for n in names), \
                    f"{type(err).__name__} does not name the file ({', '.join(map(str, names))}): {message}"
                outcome = "refused"
            else:
                outcome = "accepted"
    except BaseException:
        COUNTS[reader]["failed"] += 1
        raise
    COUNTS[reader][outcome] += 1
    _flush_counts()
    return outcome


# ------------------------------------------------------------------------------------------------ mutations

#: integers a length, count, shape or offset field may be overwritten with
INTERESTING = (0, 1, 2, 3, 4, 7, 8, 16, 64, 127, 128, 255, 256, 1024, 0x7FFF, 0x8000, 0xFFFF, 0x10000, (1 << 29) - 1,
               1 << 29, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, 0xCED7230A, 0x112, 0xF993FAC9, 0xF993FACA,
               (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
#: tokens that replace a field of a text file
HOSTILE = (b"", b"0", b"-1", b"1", b"2", b"-0", b"1.5", b"nan", b"inf", b"-inf", b"1e309", b"4294967296",
           b"18446744073709551616", b"9" * 40, b"1" * 5000, b"0x1F", b"..", b"../..", b"/", b"/etc/passwd",
           b"A/../../x.jpg", b"\x00", b"\t", b" ", b",", b";", b"#", b'"', b"'", b"\\", b"{", b"}", b"[", b"]",
           b"null", b"true", b"[]", b"{}", b'"x"', b"\xff\xfe", b"\xc3\x28", "\u00e9".encode(), b"A" * 300, b"\r",
           b"\n", b"(1,", b"()", b"(1, 2, 3, 4)", b"[[[[[[[[[[", b"\x80\x04", b"%s", b"${x}", b"_target_")


def _position(data: st.DataObject, n: int) -> int:
    """An offset into n bytes, counted from the start or from the end (truncation at every kind of offset)."""
    at = data.draw(st.integers(0, n))
    return n - at if data.draw(st.booleans()) else at


def mutate_bytes(data: st.DataObject, seed: bytes) -> bytes:
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(("flip", "byte", "integer", "truncate", "append", "insert", "delete",
                                        "duplicate")))
        pos = _position(data, len(buf))
        if op == "flip" and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "byte" and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] = data.draw(st.integers(0, 255))
        elif op == "integer":
            size = data.draw(st.sampled_from((1, 2, 4, 8)))
            value = data.draw(st.sampled_from(INTERESTING) | st.integers(0, (1 << 64) - 1)) % (1 << (8 * size))
            if data.draw(st.booleans()):
                pos -= pos % 4  # the fields of the binary formats here are 4-aligned
            buf[pos:pos + size] = value.to_bytes(size, data.draw(st.sampled_from(("little", "big"))))
        elif op == "truncate":
            del buf[pos:]
        elif op == "append":
            buf += data.draw(st.binary(max_size=64) | st.sampled_from((bytes(seed[:64]), bytes(seed[-64:]))))
        elif op == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[pos:pos + data.draw(st.integers(1, 16))]
        elif op == "duplicate" and buf:
            start = data.draw(st.integers(0, len(buf) - 1))
            buf[pos:pos] = buf[start:start + data.draw(st.integers(1, 64))]
    return bytes(buf)


_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[A-Za-z_]\w*|\s+|.', re.S)


def mutate_text(data: st.DataObject, seed: bytes) -> bytes:
    """Line and field mutations of a text file (and now and then a byte-level one)."""
    kind = data.draw(st.sampled_from(("lines", "lines", "tokens", "tokens", "bytes")))
    if kind == "bytes":
        return mutate_bytes(data, seed)
    if kind == "tokens":
        tokens = _TOKEN.findall(seed)
        for _ in range(data.draw(st.integers(1, 3))):
            if not tokens:
                tokens = [b""]
            i = data.draw(st.integers(0, len(tokens) - 1))
            op = data.draw(st.sampled_from(("replace", "replace", "delete", "copy")))
            if op == "replace":
                tokens[i] = data.draw(st.sampled_from(HOSTILE) | st.binary(max_size=8))
            elif op == "delete":
                del tokens[i]
            else:
                tokens.insert(i, tokens[data.draw(st.integers(0, len(tokens) - 1))])
        return b"".join(tokens)
    lines = seed.split(b"\n")
    for _ in range(data.draw(st.integers(1, 3))):
        if not lines:
            lines = [b""]
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(("delete", "duplicate", "swap", "insert", "field", "cut", "join", "split",
                                        "separator")))
        line = lines[i]
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, line)
        elif op == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], line
        elif op == "insert":
            lines.insert(i, data.draw(st.sampled_from(HOSTILE) | st.binary(max_size=40)))
        elif op == "field":
            fields = re.split(rb"([\s,\t]+)", line)
            k = data.draw(st.integers(0, len(fields) - 1))
            fields[k] = data.draw(st.sampled_from(HOSTILE))
            lines[i] = b"".join(fields)
        elif op == "cut":
            lines[i] = line[:data.draw(st.integers(0, len(line)))]
        elif op == "join" and i + 1 < len(lines):
            lines[i:i + 2] = [line + lines[i + 1]]
        elif op == "split" and line:
            k = data.draw(st.integers(0, len(line)))
            lines[i:i + 1] = [line[:k], line[k:]]
        elif op == "separator":
            old, new = data.draw(st.sampled_from(((b"\t", b" "), (b" ", b"\t"), (b",", b";"), (b" ", b""),
                                                  (b",", b""), (b"/", b"\\"))))
            lines[i] = line.replace(old, new)
    return b"\n".join(lines)


#: values that replace a part of a JSON file (a node's field, an attribute, a list entry)
HOSTILE_JSON = (None, True, 0, -1, 1, 2, 99999, -(1 << 63), 1 << 64, 1e308, float("inf"), "", "x", "0", "-1", "nan",
                "1e309", "(1,", "(3, 3)", "(0, 0)", "(3, 3, 3)", "..", "A/../../x.jpg", "/etc/passwd", "O8", [], {},
                [0], [[0, 0, 0]], [[99999, 0, 0]], [[-1, 0]], {"a": 1}, "1" * 5000, [[[[[[[[[[]]]]]]]]]])


def _json_slots(node, out: list) -> list:
    """(container, key) of every value in a parsed JSON document."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((node, key))
        _json_slots(value, out)
    return out


def mutate_json(data: st.DataObject, seed: bytes) -> bytes:
    """Structure mutations of a JSON file: a value replaced, deleted or duplicated anywhere in the document."""
    document = json.loads(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        slots = _json_slots(document, [])
        if not slots:
            break
        container, key = data.draw(st.sampled_from(slots))
        op = data.draw(st.sampled_from(("replace", "replace", "delete", "duplicate")))
        if op == "replace":
            # a copy: a later operation may change it in place, and the constants must stay what they are
            value = data.draw(st.sampled_from(HOSTILE_JSON) | st.integers() | st.text(max_size=8))
            container[key] = copy.deepcopy(value)
        elif op == "delete":
            del container[key]
        elif isinstance(container, list):
            container.insert(key, copy.deepcopy(container[key]))
        else:
            container[f"{key}_"] = copy.deepcopy(container[key])
    return json.dumps(document).encode()


def mutated(data: st.DataObject, seed: bytes, kind: str) -> bytes:
    """`kind`: "bytes" (binary formats), "text" (line formats) or "json" (structure, line or byte mutations)."""
    if kind == "json" and data.draw(st.booleans()):
        return mutate_json(data, seed)
    return mutate_text(data, seed) if kind in ("text", "json") else mutate_bytes(data, seed)


@contextlib.contextmanager
def replaced(path: Path, content: bytes) -> Iterator[None]:
    """`path` holds `content` for the duration (a seed file in a folder layout is mutated in place)."""
    original = path.read_bytes()
    path.write_bytes(content)
    try:
        yield
    finally:
        path.write_bytes(original)


# ------------------------------------------------------------------------------------------------ seed files


class Seeds(dict):
    """{seed name: bytes}, shown by name only when hypothesis reports a failing case."""

    def __repr__(self) -> str:
        return f"<seeds {', '.join(self)}>"


def tiny_jpeg(seed: int, size: int = 16, **save) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90, **save)
    return buf.getvalue()


def image_seeds() -> dict[str, bytes]:
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    out = Seeds({"jpeg": tiny_jpeg(0), "jpeg_progressive": tiny_jpeg(1, progressive=True)})
    for name, image, fmt in (("jpeg_grey", Image.fromarray(pixels[:, :, 0]), "JPEG"),
                             ("jpeg_cmyk", Image.fromarray(pixels).convert("CMYK"), "JPEG"),
                             ("png", Image.fromarray(pixels), "PNG"),
                             ("png_palette", Image.fromarray(pixels).convert("P"), "PNG"),
                             ("bmp", Image.fromarray(pixels), "BMP"),
                             ("webp", Image.fromarray(pixels), "WEBP")):
        buf = io.BytesIO()
        image.save(buf, format=fmt)
        out[name] = buf.getvalue()
    return out


# -- RecordIO: the project's writer, both layouts, a record split at the magic


def write_recordio(root: Path, layout: str) -> None:
    from elasticface.data.recordio import MAGIC, RecordIOWriter, pack_header

    root.mkdir(parents=True, exist_ok=True)
    jpegs = [tiny_jpeg(i) for i in range(4)]
    # a payload holding the magic at a 4-aligned offset is split into chunks (real JPEGs hit this)
    pad = (-(24 + len(jpegs[1]))) % 4
    jpegs[1] = jpegs[1] + b"\0" * pad + struct.pack("<I", MAGIC) + b"tail"
    with RecordIOWriter(str(root / "train.rec"), str(root / "train.idx")) as writer:
        if layout == "legacy":  # insightface's faces_emore: header record, images 1..N, identity ranges
            writer.write(0, pack_header([5.0, 7.0]))
            for key, (jpeg, label) in enumerate(zip(jpegs, (0, 0, 1, 1)), 1):
                writer.write_image(key, float(label), jpeg)
            writer.write(5, pack_header([1.0, 3.0]))
            writer.write(6, pack_header([3.0, 5.0]))
            (root / "property").write_text("2,16,16\n")
        else:  # im2rec: every key an image, one vector label
            for key, (jpeg, label) in enumerate(zip(jpegs, (0.0, 1.0, [1.0, 7.0], 2.0))):
                writer.write_image(key, label, jpeg)


# -- .bin verification sets


def _py2_pickle(images: list[bytes], issame: list[bool]) -> bytes:
    """What Python 2's cPickle wrote for (list of str, list of bool), protocol 2: BINSTRING entries."""
    out = [b"\x80\x02", b"]q\x00(", *(b"T" + struct.pack("<i", len(im)) + im for im in images), b"e]q\x01(",
           *(b"\x88" if s else b"\x89" for s in issame), b"e\x86q\x02."]
    return b"".join(out)


def bin_seeds(folder: Path) -> dict[str, bytes]:
    from elasticface.data.pair_files import write_bin

    images = [tiny_jpeg(10 + i) for i in range(4)]
    issame = [True, False]
    write_bin(str(folder / "project.bin"), images, issame)
    arrays = [np.frombuffer(im, dtype=np.uint8) for im in images]
    return Seeds({"project_writer": (folder / "project.bin").read_bytes(),
            "python2_cpickle": _py2_pickle(images, issame),
            "numpy_arrays_protocol2": pickle.dumps((arrays, issame), protocol=2),
            "protocol0": pickle.dumps((images, issame), protocol=0)})


# -- MXNet .params: MXNet's own files, and an independent writer for the older array versions


def params_bytes(arrays: dict[str, np.ndarray], version: str) -> bytes:
    flags = {np.dtype(np.float32): 0, np.dtype(np.float16): 2, np.dtype(np.int32): 4, np.dtype(np.uint8): 3}
    out = [struct.pack("<QQQ", 0x112, 0, len(arrays))]
    for a in arrays.values():
        if version == "legacy":  # before v1: uint32 ndim and dims, no magic
            out.append(struct.pack(f"<I{a.ndim}I", a.ndim, *a.shape))
        else:  # v1: magic, int32 ndim, int64 dims
            out.append(struct.pack(f"<Ii{a.ndim}q", 0xF993FAC8, a.ndim, *a.shape))
        out.append(struct.pack("<iii", 1, 0, flags[a.dtype]) + a.astype(a.dtype.newbyteorder("<")).tobytes())
    out.append(struct.pack("<Q", len(arrays)))
    for name in arrays:
        out.append(struct.pack("<Q", len(name.encode())) + name.encode())
    return b"".join(out)


def params_seeds() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    arrays = {"arg:conv0_weight": rng.normal(size=(2, 3, 1, 1)).astype(np.float32),
              "aux:bn0_moving_var": np.ones(2, np.float16), "arg:ids": np.arange(3, dtype=np.int32)}
    return Seeds({"mxnet_v2": (MXNET / "arrays_v2.params").read_bytes(),
                  "mxnet_v3": (MXNET / "arrays_v3.params").read_bytes(),
                  "v1": params_bytes(arrays, "v1"), "legacy": params_bytes(arrays, "legacy")})


# -- torch files: state_dicts (zip and legacy), a Lightning checkpoint, TorchScript, ONNX


def tiny_state(prefix: str = "") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    state = {"conv1.weight": torch.randn(4, 3, 3, 3, generator=g), "bn1.running_mean": torch.zeros(4),
             "bn1.num_batches_tracked": torch.tensor(3), "fc.weight": torch.randn(8, 4, generator=g).half()}
    return {prefix + k: v for k, v in state.items()}


def torch_bytes(obj, zip_format: bool = True) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zip_format)
    return buf.getvalue()


def checkpoint_dict() -> dict:
    return {"epoch": 1, "global_step": 10, "pytorch-lightning_version": "2.6.6", "state_dict": tiny_state("backbone."),
            "hyper_parameters": {"head": {"_target_": "elasticface.heads.ArcFace", "s": 64.0, "m": 0.5},
                                 "optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1},
                                 "num_classes": 8, "embedding_size": 8},
            "optimizer_states": [{"state": {0: {"momentum_buffer": torch.ones(3)}}, "param_groups": [{"lr": 0.1}]}],
            "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": 1}}}}}


class TinyEmbedder(torch.nn.Module):
    """[B, 3, 112, 112] -> [B, 8] with a few weights: a mutation mostly hits the graph, not the numbers."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pool = torch.nn.AvgPool2d(56)
        self.proj = torch.nn.Linear(12, 8)

    def forward(self, x):
        return self.proj(torch.relu(self.pool(x)).flatten(1))


def model_files(folder: Path) -> dict[str, Path]:
    import warnings

    from elasticface.export.onnx import export_onnx
    from elasticface.export.torchscript import export_torchscript

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"pth": folder / "backbone.pth", "pth_ddp": folder / "ddp.pth", "pth_legacy": folder / "legacy.pth",
             "ckpt": folder / "last.ckpt", "torchscript": folder / "model.pt", "onnx": folder / "model.onnx"}
    paths["pth"].write_bytes(torch_bytes(tiny_state()))
    paths["pth_ddp"].write_bytes(torch_bytes(tiny_state("module.")))
    paths["pth_legacy"].write_bytes(torch_bytes(tiny_state(), zip_format=False))
    paths["ckpt"].write_bytes(torch_bytes(checkpoint_dict()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_torchscript(TinyEmbedder().eval(), str(paths["torchscript"]), check=False)
        export_onnx(TinyEmbedder().eval(), str(paths["onnx"]), check=False)
    return paths


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from elasticface.backbones.weights import file_kind
    from elasticface.eval.embed import load_model_file

    paths = model_files(tmp_path_factory.mktemp("models"))
    file_kind(str(paths["pth"]))  # the imports and caches, once, outside a case's time limit
    load_model_file(str(paths["onnx"]), "cpu")
    return paths


# -- text layouts


def write_pair_lists(root: Path) -> dict[str, Path]:
    """A plain list, LFW's pairs.txt and CFP's protocol folder, with (empty) photos where they say."""
    images = root / "images"
    for rel in ("a/1.jpg", "a/2.jpg", "b/1.jpg", "b/2.jpg"):
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        (images / rel).write_bytes(b"")
    (root / "pairs.txt").write_text("a/1.jpg a/2.jpg 1\na/1.jpg b/1.jpg 0\nb/1.jpg b/2.jpg 1\nb/2.jpg a/2.jpg 0\n")
    lfw = root / "lfw"
    for name, n in (("Ann_Lee", 2), ("Bo_Xi", 2), ("Cy", 1)):
        (lfw / name).mkdir(parents=True, exist_ok=True)
        for k in range(1, n + 1):
            (lfw / name / f"{name}_{k:04d}.jpg").write_bytes(b"")
    (root / "lfw_pairs.txt").write_text("2\t1\nAnn_Lee\t1\t2\nAnn_Lee\t1\tCy\t1\nBo_Xi\t1\t2\nBo_Xi\t2\tCy\t1\n")
    cfp = root / "cfp"
    for ident in ("001", "002"):
        for kind in ("frontal", "profile"):
            for k in (1, 2):
                photo = cfp / "Data" / "Images" / ident / kind / f"0{k}.jpg"
                photo.parent.mkdir(parents=True, exist_ok=True)
                photo.write_bytes(b"")
    protocol = cfp / "Protocol"
    (protocol / "Split" / "FP" / "01").mkdir(parents=True)
    for kind, letter in (("frontal", "F"), ("profile", "P")):
        lines = [f"{i} ../Data/Images/{ident}/{kind}/0{k}.jpg"
                 for i, (ident, k) in enumerate([("001", 1), ("001", 2), ("002", 1), ("002", 2)], 1)]
        (protocol / f"Pair_list_{letter}.txt").write_text("\n".join(lines) + "\n")
    (protocol / "Split" / "FP" / "01" / "same.txt").write_text("1,1\n3,4\n")
    (protocol / "Split" / "FP" / "01" / "diff.txt").write_text("1,3\n4,2\n")
    return {"plain": root / "pairs.txt", "lfw": root / "lfw_pairs.txt", "cfp_list": protocol / "Pair_list_F.txt",
            "cfp_split": protocol / "Split" / "FP" / "01" / "same.txt"}


def write_ijb(root: Path) -> Path:
    """insightface's IJB-C meta layout (the tests' writer), with the 1:N lists."""
    from helpers.ijb_files import make_ijb, write_1n_lists

    base = make_ijb(str(root), "IJBC")
    write_1n_lists(base, "IJBC")
    return Path(base)


def write_testpack(root: Path) -> tuple[Path, Path]:
    """A MegaFace testpack written by the project's own builder (elasticface-megaface-pack), and the devkit's
    template lists."""
    from elasticface.eval.identification.stand_in import build_megaface_pack
    from helpers.megaface_files import write_templatelists

    faces = root / "faces"
    for person, n in {"Ann": 3, "Bob": 3, "Cy": 1, "Di": 1, "Ed": 1}.items():
        (faces / person).mkdir(parents=True)
        for k in range(1, n + 1):
            (faces / person / f"{person}_{k:04d}.jpg").write_bytes(tiny_jpeg(k))
    (faces / "align_report.csv").write_text("source,problem,detail\nAnn/Ann_0002.jpg,several_faces,2 faces\n"
                                            "Di/Di_0001.jpg,several_faces,2 faces\n")
    pack = root / "pack"
    build_megaface_pack(str(faces), str(pack), min_probe_photos=3, say=lambda _: None)
    probes = [f"{p}/{p}_{k:04d}.jpg" for p in ("Ann", "Bob") for k in (1, 2, 3)]
    lists = root / "templatelists"
    write_templatelists(str(lists), [p.replace(".jpg", ".png") for p in probes], [p.split("/")[0] for p in probes],
                        {10: ["C/Cy/Cy_0001.jpg", "D/Di/Di_0001.jpg", "E/Ed/Ed_0001.jpg"]})
    return pack, lists


def write_landmarks(root: Path) -> tuple[dict[str, Path], list[str]]:
    from elasticface.align.folder import FACE_COLUMNS
    from elasticface.align.template import arcface_template

    photos = ["a/1.jpg", "a/2.jpg", "b/1.jpg"]
    points = [arcface_template(112) + i for i in range(3)]
    root.mkdir(parents=True, exist_ok=True)
    txt = root / "faces_5pts_score.txt"
    txt.write_text("".join(f"{name} " + " ".join(f"{v:.3f}" for v in p.ravel()) + " 0.99\n"
                           for name, p in zip(photos, points)))
    csv_path = root / "faces.csv"
    rows = [",".join(FACE_COLUMNS)]
    for i, (name, p) in enumerate(zip(photos, points)):
        rows.append(",".join([f"{i:06d}.jpg", name, "0", "0.99", "1", "2", "100", "110",
                              *(f"{v:.2f}" for v in p.ravel())]))
    csv_path.write_text("\n".join(rows) + "\n")
    npy = root / "landmarks.npy"
    np.save(npy, np.stack(points))
    return {"txt": txt, "csv": csv_path, "npy": npy}, photos


# ------------------------------------------------------------------------------------------------ properties

DATA = st.data()


@pytest.fixture(scope="module")
def recordio_roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("recordio")
    roots = {layout: base / layout for layout in ("legacy", "im2rec")}
    for layout, root in roots.items():
        write_recordio(root, layout)
    return roots


@pytest.mark.parametrize("seed", ["legacy/train.rec", "legacy/train.idx", "legacy/property", "im2rec/train.rec",
                                  "im2rec/train.idx"])
@FUZZ
@given(data=DATA)
def test_mutated_recordio(recordio_roots, seed, data):
    from elasticface.data.recordio import scan_records
    from elasticface.data.recordio_dataset import RecordIODataset

    layout, name = seed.split("/")
    root = recordio_roots[layout]
    content = mutated(data, (root / name).read_bytes(), "bytes" if name == "train.rec" else "text")

    def read():
        ds = RecordIODataset(str(root), max_corrupt=1, image_size=16)
        for i in range(len(ds)):
            ds[i]
        if name == "train.rec":  # elasticface-convert reindex
            list(scan_records(str(root / name)))

    with replaced(root / name, content):
        run_case("recordio", [root], read)


@pytest.fixture(scope="module")
def bins(tmp_path_factory) -> dict[str, bytes]:
    return bin_seeds(tmp_path_factory.mktemp("bins"))


@pytest.mark.parametrize("seed", ["project_writer", "python2_cpickle", "numpy_arrays_protocol2", "protocol0"])
@FUZZ
@given(data=DATA)
def test_mutated_bin(bins, seed, data, tmp_path):
    from elasticface.data.pair_files import load_bin

    path = tmp_path / "lfw.bin"
    path.write_bytes(mutated(data, bins[seed], "text" if seed == "protocol0" and data.draw(st.booleans()) else "bytes"))

    def read():
        pairs = load_bin(str(path), image_size=16)
        for i in range(len(pairs)):
            pairs.load_image(i)

    run_case("bin", [path], read)


@pytest.mark.parametrize("seed", ["mxnet_v2", "mxnet_v3", "v1", "legacy"])
@FUZZ
@given(data=DATA)
def test_mutated_mxnet_params(seed, data, tmp_path):
    from elasticface.backbones.mxnet_params import read_mxnet_params

    path = tmp_path / "model-0000.params"
    path.write_bytes(mutated(data, params_seeds()[seed], "bytes"))
    run_case("mxnet_params", [path], lambda: read_mxnet_params(str(path)))


@pytest.fixture(scope="module")
def fresnet(tmp_path_factory) -> Path:
    from elasticface.backbones.weights import read_state_dict

    folder = tmp_path_factory.mktemp("zoo") / "fresnet"
    shutil.copytree(MXNET / "fresnet", folder)
    read_state_dict(str(folder / "model-0000.params"))  # builds the registered layouts once (match_backbone's cache)
    return folder


@pytest.mark.parametrize("seed", ["model-symbol.json", "model-0000.params"])
@FUZZ
@given(data=DATA)
def test_mutated_mxnet_zoo(fresnet, seed, data):
    from elasticface.backbones.weights import read_state_dict

    path = fresnet / seed
    with replaced(path, mutated(data, path.read_bytes(), "json" if seed.endswith(".json") else "bytes")):
        run_case("mxnet_zoo", [fresnet], lambda: read_state_dict(str(fresnet / "model-0000.params")))


@pytest.mark.parametrize("seed", ["pth", "pth_ddp", "pth_legacy"])
@FUZZ
@given(data=DATA)
def test_mutated_state_dict(models, seed, data, tmp_path):
    from elasticface.backbones.weights import read_state_dict

    path = tmp_path / "weights.pth"
    path.write_bytes(mutated(data, models[seed].read_bytes(), "bytes"))
    run_case("state_dict", [path], lambda: read_state_dict(str(path)))


@pytest.mark.parametrize("mmap", [False, True])
@FUZZ
@given(data=DATA)
def test_mutated_checkpoint(models, mmap, data, tmp_path):
    from elasticface.untrusted import check_targets, read_checkpoint

    path = tmp_path / "last.ckpt"
    path.write_bytes(mutated(data, models["ckpt"].read_bytes(), "bytes"))

    def read():
        checkpoint = read_checkpoint(str(path), mmap=mmap)
        check_targets(checkpoint.get("hyper_parameters") or {}, f"{path} (hyper_parameters)")

    run_case("checkpoint", [path], read)


@FUZZ
@given(data=DATA)
def test_mutated_onnx(models, data, tmp_path):
    from elasticface.eval.embed import load_model_file

    path = tmp_path / "model.onnx"
    path.write_bytes(mutated(data, models["onnx"].read_bytes(), "bytes"))

    def read():
        embedder = load_model_file(str(path), "cpu")
        embedder(torch.zeros(2, 3, 112, 112))

    run_case("onnx", [path], read)


@FUZZ
@given(data=DATA)
def test_mutated_torchscript(models, data, tmp_path):
    from elasticface.eval.embed import load_model_file

    path = tmp_path / "model.pt"
    path.write_bytes(mutated(data, models["torchscript"].read_bytes(), "bytes"))
    opened = []
    real_jit_load = torch.jit.load

    def spy(*args, **kwargs):
        opened.append(args)
        return real_jit_load(*args, **kwargs)

    torch.jit.load = spy
    try:
        run_case("torchscript", [path], lambda: load_model_file(str(path), "cpu"))
    finally:
        torch.jit.load = real_jit_load
    assert not opened, "a TorchScript file was loaded without allow_torchscript"


@pytest.mark.parametrize("seed", ["pth", "pth_legacy", "ckpt", "torchscript", "mxnet"])
@FUZZ
@given(data=DATA)
def test_mutated_model_detection(models, fresnet, seed, data, tmp_path):
    from elasticface.backbones.weights import file_kind
    from elasticface.utils.model_files import model_file_kind

    if seed == "mxnet":  # the parameter file beside its symbol, as released
        shutil.copy(fresnet / "model-symbol.json", tmp_path / "model-symbol.json")
        path, original = tmp_path / "model-0000.params", (MXNET / "arrays_v2.params").read_bytes()
        original = (fresnet / "model-0000.params").read_bytes()[:4096] if data.draw(st.booleans()) else original
    else:
        path, original = tmp_path / models[seed].name, models[seed].read_bytes()
    path.write_bytes(mutated(data, original, "bytes"))

    def read():
        model_file_kind(str(path))  # the commands' check of weights= before anything is built
        file_kind(str(path))  # what the loaders then read

    run_case("model_detection", [path], read)


@pytest.fixture(scope="module")
def pair_lists(tmp_path_factory) -> dict[str, Path]:
    return write_pair_lists(tmp_path_factory.mktemp("pairs"))


@pytest.mark.parametrize("seed", ["plain", "lfw", "cfp_list", "cfp_split"])
@FUZZ
@given(data=DATA)
def test_mutated_pair_list(pair_lists, seed, data):
    from elasticface.data.pair_files import pairs_from_list

    path = pair_lists[seed]
    root = pair_lists["plain"].parent
    cfp = (root / "cfp" / "Protocol" / "Split" / "FP", root / "cfp" / "Data" / "Images")
    pairs_file, image_root = {"plain": (path, root / "images"), "lfw": (path, root / "lfw"), "cfp_list": cfp,
                              "cfp_split": cfp}[seed]
    with replaced(path, mutated(data, path.read_bytes(), "text")):
        run_case("pair_list", [path], lambda: pairs_from_list(str(pairs_file), str(image_root)))


@pytest.fixture(scope="module")
def ijb(tmp_path_factory) -> Path:
    return write_ijb(tmp_path_factory.mktemp("ijb"))


@pytest.mark.parametrize("seed", ["ijbc_face_tid_mid.txt", "ijbc_name_5pts_score.txt",
                                  "ijbc_template_pair_label.txt", "ijbc_1N_gallery_G1.csv",
                                  "ijbc_1N_probe_mixed.csv"])
@FUZZ
@given(data=DATA)
def test_mutated_ijb_meta(ijb, seed, data):
    from elasticface.eval.ijb import load_ijb_meta
    from elasticface.eval.identification.ijb_1n import gallery_files, read_template_subjects

    path = ijb / "meta" / seed

    def read():
        if seed.endswith(".csv"):
            for csv_path in [*gallery_files(str(ijb / "meta"), "IJBC"), str(ijb / "meta" / "ijbc_1N_probe_mixed.csv")]:
                read_template_subjects(csv_path)
        else:
            load_ijb_meta(str(ijb.parent), "IJBC")

    with replaced(path, mutated(data, path.read_bytes(), "text")):
        run_case("ijb_meta", [path], read)


@pytest.fixture(scope="module")
def testpack(tmp_path_factory) -> tuple[Path, Path]:
    return write_testpack(tmp_path_factory.mktemp("megaface"))


@pytest.mark.parametrize("seed", ["facescrub_lst", "megaface_lst", "facescrub_noises.txt", "megaface_noises.txt",
                                  "facescrub_features_list.json", "megaface_features_list.json_10_1"])
@FUZZ
@given(data=DATA)
def test_mutated_megaface_testpack(testpack, seed, data):
    from elasticface.eval.identification.devkit_lists import devkit_distractors, devkit_probes
    from elasticface.eval.identification.testpack import read_testpack

    pack, lists = testpack
    path = (lists if seed.endswith(("json", "_1")) else pack) / seed

    def read():
        for images in (True, False):
            problems: list[str] = []
            found = read_testpack(str(pack), images=images)
            devkit_probes(str(lists), found, problems)
            devkit_distractors(str(lists), 10, 1, found, problems)

    with replaced(path, mutated(data, path.read_bytes(), "json" if "json" in seed else "text")):
        run_case("megaface_testpack", [path], read)


@pytest.mark.parametrize("seed", ["project_writer_512", "gen_megaface_4", "gen_megaface_65536"])
@FUZZ
@given(data=DATA)
def test_mutated_devkit_features(seed, data, tmp_path):
    from elasticface.eval.identification.devkit_files import feature_bytes, read_feature, read_features
    from helpers.megaface_files import devkit_bytes

    rng = np.random.default_rng(0)
    original = {"project_writer_512": lambda: feature_bytes(rng.normal(size=512)),
                "gen_megaface_4": lambda: devkit_bytes(rng.normal(size=4)),
                "gen_megaface_65536": lambda: devkit_bytes(np.zeros(65536))}[seed]()
    path = tmp_path / "Ann_1.png_algo.bin"
    path.write_bytes(mutated(data, original, "bytes"))
    good = tmp_path / "Bob_1.png_algo.bin"
    good.write_bytes(original)

    def read():
        read_feature(str(path))
        try:
            read_features([str(good), str(path)], [], "probes")  # a bad file among good ones is skipped, named
        except BadFile as err:
            raise AssertionError(f"read_features did not skip the bad file: {err}") from err

    run_case("devkit_features", [path], read)


@pytest.fixture(scope="module")
def landmark_files(tmp_path_factory) -> tuple[dict[str, Path], list[str]]:
    return write_landmarks(tmp_path_factory.mktemp("landmarks"))


@pytest.mark.parametrize("seed", ["txt", "csv", "npy"])
@FUZZ
@given(data=DATA)
def test_mutated_landmarks(landmark_files, seed, data):
    from elasticface.align.landmark_files import read_landmark_file

    paths, photos = landmark_files
    path = paths[seed]
    with replaced(path, mutated(data, path.read_bytes(), "bytes" if seed == "npy" else "text")):
        run_case("landmarks", [path], lambda: read_landmark_file(str(path), photos))


IMAGES = image_seeds()
#: five points inside a 16 x 16 photo, in insightface's order (eyes, nose, mouth corners)
LANDMARKS_16 = np.array([[5.5, 6.5], [10.5, 6.5], [8.0, 9.0], [6.0, 12.0], [10.0, 12.0]])


@pytest.mark.parametrize("seed", sorted(IMAGES))
@FUZZ
@given(data=DATA)
def test_mutated_images(seed, data, tmp_path):
    from elasticface.align.photos import read_photo
    from elasticface.data.folder import ImageFiles
    from elasticface.eval.ijb import IJBImages

    path = tmp_path / f"photo.{seed.split('_')[0].replace('jpeg', 'jpg')}"
    path.write_bytes(mutated(data, IMAGES[seed], "bytes"))

    def read():
        read_photo(str(path))  # elasticface-align
        ImageFiles(str(tmp_path), [path.name], image_size=16, resize=True)[0]  # elasticface-embed
        IJBImages(str(tmp_path), [path.name], LANDMARKS_16[None], image_size=16)[0]  # IJB's loose crops

    run_case("images", [path], read)


@pytest.mark.parametrize("seed", ["run_file", "beside_weights"])
@FUZZ
@given(data=DATA)
def test_mutated_thresholds(seed, data, tmp_path):
    from elasticface.eval.thresholds import read_file, store_thresholds

    weights = tmp_path / "model.pth"
    weights.write_bytes(b"weights")
    rows = [{"benchmark": "lfw", "threshold": 1.4, "acc": 0.99, "pairs": 6000},
            {"benchmark": "cfp_fp", "threshold": 1.5, "acc": 0.95, "pairs": 7000}]
    run = Path(store_thresholds(str(tmp_path), str(weights), rows, True))
    original = run.read_bytes() if seed == "run_file" else json.dumps(json.loads(run.read_text())["sets"]).encode()
    path = tmp_path / ("thresholds.json" if seed == "run_file" else "model.pth.thresholds.json")
    path.write_bytes(mutated(data, original, "json"))
    run_case("thresholds", [path], lambda: read_file(str(path)))


# ------------------------------------------------------------------------------------------------ size fields
# A length, count or shape field that claims gigabytes: the reader refuses it within a second, without allocating
# what it claims (tracemalloc sees Python's and numpy's allocations; torch's are checked by the refusal itself).

ALLOCATION_LIMIT = 16 << 20


@contextlib.contextmanager
def bounded(named: os.PathLike | str) -> Iterator[None]:
    """The block raises BadFile whose message holds `named`, within a second, with at most ALLOCATION_LIMIT bytes
    allocated."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(BadFile, match=re.escape(str(named))):
            with deadline(5):
                yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 1.0
    assert peak < ALLOCATION_LIMIT, f"{peak:,} bytes allocated"


def test_recordio_length_fields_claiming_512_mb(tmp_path):
    from elasticface.data.faults import DroppedRecord
    from elasticface.data.recordio import MAGIC, read_record
    from elasticface.data.recordio_dataset import RecordIODataset

    write_recordio(tmp_path, "im2rec")
    rec = tmp_path / "train.rec"
    data = bytearray(rec.read_bytes())
    struct.pack_into("<II", data, 0, MAGIC, (1 << 29) - 1)  # the first record says 512 MB
    rec.write_bytes(bytes(data))
    with open(rec, "rb") as f:
        with bounded("truncated record at byte 0"):
            read_record(f, 0)
        with bounded("truncated record at byte 0"):
            read_record(f.fileno(), 0)  # a raw fd: the reader finds the file's size itself
    ds = RecordIODataset(str(tmp_path), image_size=16)
    dropped = ds[0]  # skipped and counted, as any corrupt record
    assert isinstance(dropped, DroppedRecord) and "truncated record at byte 0" in dropped.reason
    assert ds.corrupt_keys == [0] and not isinstance(ds[1], DroppedRecord)
    (tmp_path / "train.idx").write_text(f"0\t{1 << 62}\n1\t-8\n")
    with bounded(tmp_path / "train.idx"):
        RecordIODataset(str(tmp_path), image_size=16)


def test_params_counts_and_shapes_claiming_terabytes(tmp_path):
    from elasticface.backbones.mxnet_params import read_mxnet_params

    path = tmp_path / "model-0000.params"
    for ndim, dims in ((2, (1 << 20, 1 << 20)), (4, (0, 1 << 62, 1 << 62, 7)), (1, ((1 << 63) - 1,))):
        path.write_bytes(struct.pack("<QQQ", 0x112, 0, 1) + struct.pack(f"<IiI{ndim}q", 0xF993FAC9, 0, ndim, *dims)
                         + struct.pack("<iii", 1, 0, 0) + b"\0" * 64)
        with bounded(path):
            read_mxnet_params(str(path))
    path.write_bytes(struct.pack("<QQQ", 0x112, 0, 999_999) + b"\0" * 16)  # a million arrays in 40 bytes
    with bounded(path):
        read_mxnet_params(str(path))
    arrays = params_bytes({"arg:w": np.ones(2, np.float32)}, "v1")
    path.write_bytes(arrays[:-13] + struct.pack("<Q", (1 << 64) - 1) + b"arg:w")  # a name 2^64 bytes long
    with bounded(path):
        read_mxnet_params(str(path))


def test_devkit_header_claiming_2_gb(tmp_path):
    from elasticface.eval.identification.devkit_files import read_feature

    path = tmp_path / "Ann_1.png_algo.bin"
    path.write_bytes(struct.pack("<4i", 0x7FFFFFFF, 1, 4, 5) + b"\0" * (4 * 70_000))
    with bounded(path):
        read_feature(str(path))


def _op(code: bytes, value: int, size: int) -> bytes:
    return code + value.to_bytes(size, "little")


def _object_array_pickle(size: int) -> bytes:
    """([an object array whose shape says `size` elements but whose state holds none, b"x"], [True]): numpy 2.4
    crashes (SIGSEGV) unpickling it, whatever the size; the .bin reader of before this test refused nothing of it."""
    d = pickle.dumps(([np.array([None], dtype=object), b"x"], [True]), protocol=2)
    i = d.find(b"(K\x01K\x01\x85")
    return (d[:i] + b"(K\x01" + _op(b"J", size, 4) + b"\x85" + d[i + 6:]).replace(b"Na", b"", 1)


@pytest.mark.parametrize("case", ["bytes8", "bytes4", "unicode8", "memo_index", "frame", "bytearray_size",
                                  "bytes_size", "ndarray_shape", "reconstruct_shape", "object_array",
                                  "object_array_small"])
def test_bin_pickle_lengths_claiming_gigabytes(case, tmp_path):
    """CPython's unpickler allocates a counted string's length, and grows its memo table to an index, before it
    reads on; numpy allocates an array's shape. Each of these, claiming gigabytes in a few bytes, is refused."""
    from elasticface.data.pair_files import load_bin

    proto = b"\x80\x04"
    core = "numpy._core" if hasattr(np, "_core") else "numpy.core"
    glob = f"c{core}.multiarray\n_reconstruct\n".encode()
    payload = {
        "bytes8": proto + _op(b"\x8e", 1 << 40, 8) + b"abc.",                       # BINBYTES8
        "bytes4": b"\x80\x03" + _op(b"B", 0xFFFFFFF0, 4) + b"abc.",                # BINBYTES
        "unicode8": proto + _op(b"\x8d", 1 << 33, 8) + b"abc.",                    # BINUNICODE8
        "memo_index": b"\x80\x02N" + _op(b"r", 1 << 28, 4) + b".",                 # LONG_BINPUT 2^28: a 4 GB memo
        "frame": proto + _op(b"\x95", 1 << 40, 8) + b"N.",                         # FRAME
        "bytearray_size": b"\x80\x02c__builtin__\nbytearray\n" + _op(b"J", 0x7FFFFFFF, 4) + b"\x85R.",
        "bytes_size": b"\x80\x02cbuiltins\nbytes\n" + _op(b"J", 0x7FFFFFFF, 4) + b"\x85R.",
        "ndarray_shape": b"\x80\x02cnumpy\nndarray\n" + _op(b"J", 0x7FFFFFFF, 4) + b"\x85\x85R.",
        "reconstruct_shape": b"\x80\x02" + glob + b"cnumpy\nndarray\n" + _op(b"J", 0x7FFFFFFF, 4)
        + b"\x85C\x01b\x87R.",
        "object_array": _object_array_pickle(1 << 28),
        "object_array_small": _object_array_pickle(2),
    }[case]
    path = tmp_path / "lfw.bin"
    path.write_bytes(payload)
    with bounded(path):
        load_bin(str(path))


def test_npy_landmarks_claiming_terabytes(tmp_path, landmark_files):
    from elasticface.align.landmark_files import read_landmark_file

    _, photos = landmark_files
    path = tmp_path / "landmarks.npy"
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000, 5, 2), }"
    header = header + " " * ((-(10 + len(header) + 1)) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 240)
    with bounded(path):
        read_landmark_file(str(path), photos)


def _central_record(archive: bytes, suffix: bytes) -> int:
    """Offset of the zip central directory record of the entry whose name ends with `suffix`."""
    at = archive.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack_from("<H", archive, at + 28)[0]
        if archive[at + 46:at + 46 + length].endswith(suffix):
            return at
        at = archive.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"no entry {suffix!r}")


def test_torch_files_whose_sizes_claim_more_than_the_file(models, tmp_path):
    from elasticface.backbones.weights import read_state_dict
    from elasticface.untrusted import read_checkpoint

    # a zip entry whose directory record claims 2 GB: torch's reader allocates a record's stated size, then reads
    data = bytearray(models["pth"].read_bytes())
    struct.pack_into("<II", data, _central_record(bytes(data), b"/data/0") + 20, 0x7FFFFFFF, 0x7FFFFFFF)
    path = tmp_path / "big.pth"
    path.write_bytes(bytes(data))
    with bounded(path):
        read_state_dict(str(path))
    with bounded(path):
        read_checkpoint(str(path))
    # a legacy (pre-1.6) file whose first storage claims 2^31 - 1 floats: torch reserves 8 GB before it reads
    data = models["pth_legacy"].read_bytes()
    at = data.find(b"X\x03\x00\x00\x00cpu") + 8
    at += 2 if data[at:at + 1] == b"q" else 0  # the memo PUT after the location
    assert data[at:at + 1] == b"K" and data[at + 1] == 4 * 3 * 3 * 3  # BININT1 numel of conv1.weight
    path = tmp_path / "legacy.pth"
    path.write_bytes(data[:at] + _op(b"J", 0x7FFFFFFF, 4) + data[at + 2:])
    with bounded(path):
        read_state_dict(str(path))


# ------------------------------------------------------------------------------------------------ list entries


@pytest.mark.parametrize("entry", ["A/../../planted.jpg", "ABS", "A/link.jpg", "../planted.jpg"])
def test_testpack_entries_that_leave_their_folder_are_refused_unread(entry, tmp_path, monkeypatch):
    """A testpack list entry that leaves facescrub_images/ (`..`, an absolute path, a link leading out) is refused,
    naming the list, the line and the entry; the image it points at, planted outside, is never opened."""
    from elasticface.eval.identification.testpack import read_testpack
    from helpers.megaface_files import evaluate_pack

    pack, _ = write_testpack(tmp_path)
    planted = tmp_path / "planted.jpg"
    planted.write_bytes(tiny_jpeg(99))
    (pack / "facescrub_images" / "A").mkdir()
    (pack / "facescrub_images" / "A" / "link.jpg").symlink_to(planted)
    entry = str(planted) if entry == "ABS" else entry
    listing = pack / "facescrub_lst"
    lines = listing.read_text().splitlines()
    lines.insert(2, entry)
    listing.write_text("\n".join(lines) + "\n")
    opened = []
    real_open = open

    def spy(file, *args, **kwargs):
        opened.append(os.path.realpath(file) if isinstance(file, (str, os.PathLike)) else file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    message = rf"^{re.escape(str(listing))}:3: the entry {re.escape(repr(entry))} leaves facescrub_images/"
    with pytest.raises(BadFile, match=message):
        read_testpack(str(pack))
    with pytest.raises(BadFile, match=message):
        evaluate_pack(lambda x: x.flatten(1)[:, :8], pack, sizes=[2])
    assert os.path.realpath(planted) not in opened
    if entry == "A/link.jpg":  # features read from files (no image opened): the lexical rule alone applies
        assert read_testpack(str(pack), images=False).probes[2] == entry
