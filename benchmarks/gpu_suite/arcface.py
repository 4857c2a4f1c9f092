"""insightface's arcface_torch training step, imported from a checkout given by path, timed for the GPU suite.

The step is train_v2.py's (deepinsight/insightface, recognition/arcface_torch): its `get_model` iresnet in
DistributedDataParallel (bucket_cap_mb 16, find_unused_parameters, fp16_compress_hook, static graph),
`PartialFC_V2` with `CombinedMarginLoss(64, 1.0, 0.5, 0.0)` (the ms1mv2 configs' ArcFace margin), SGD
(lr 0.1, momentum 0.9, weight decay 5e-4, backbone and centres as two groups), `PolynomialLRWarmup`, its
mixed precision (the backbone's own fp16 autocast with `fp16=True`, a GradScaler with growth_interval 100;
PartialFC_V2 built with fp16=False as train_v2.py builds it), gradient-norm clipping 5 on the backbone,
`cudnn.benchmark = True`, and the `loss.item()` its loop reads every step. Nothing of it is copied here.

PartialFC_V2 needs torch.distributed: a one-process group is started if none is (nccl on a GPU, gloo on a
CPU, on a free localhost port). On a CPU, which only checks that the step runs, its hard-coded `.cuda()`
calls are redirected to the CPU while its modules run, and it trains in fp32 (`fp16=False`).
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import distributed, nn

from gpu_suite.measure import Measured, MemoryWatch, StepTimer, SyncCounter, count_flops, kept_losses
from gpu_suite.template import SYNC_STEPS

#: the template's backbone names -> arcface_torch's get_model names
NETWORKS = {"iresnet18": "r18", "iresnet34": "r34", "iresnet50": "r50", "iresnet100": "r100", "iresnet200": "r200"}
MODULE_FILE = "partial_fc_v2.py"


def locate(path: str) -> Path:
    """The arcface_torch folder: `path` itself, or recognition/arcface_torch inside an insightface checkout."""
    root = Path(path).expanduser()
    for candidate in (root, root / "recognition" / "arcface_torch"):
        if (candidate / MODULE_FILE).is_file() and (candidate / "backbones").is_dir():
            return candidate.resolve()
    raise FileNotFoundError(
        f"--arcface-torch {path}: no {MODULE_FILE} and backbones/ there nor in recognition/arcface_torch "
        "(expected a checkout of deepinsight/insightface or its recognition/arcface_torch folder)"
    )


def load(path: str) -> SimpleNamespace:
    """arcface_torch's modules, imported from its folder (put first on sys.path)."""
    folder = locate(path)
    sys.path.insert(0, str(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mods = {name: importlib.import_module(name) for name in ("backbones", "losses", "partial_fc_v2",
                                                                 "lr_scheduler")}
    for name, mod in mods.items():
        if not str(getattr(mod, "__file__", "")).startswith(str(folder)):
            raise ImportError(f"--arcface-torch {path}: `import {name}` found {mod.__file__}, not arcface_torch's")
    return SimpleNamespace(folder=folder, **mods)


def ensure_process_group(device: str) -> None:
    """A one-process group for PartialFC_V2 (it asserts torch.distributed is initialised)."""
    if distributed.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    distributed.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                   rank=0, world_size=1)


@contextlib.contextmanager
def its_cuda_calls_on(device: str):
    """On a CPU, arcface_torch's `tensor.cuda()` calls return the tensor where it is."""
    if device == "cuda":
        yield
        return
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.cuda = original


def build(at: SimpleNamespace, network: str, classes: int, rate: float, device: str, fp16: bool, total_steps: int):
    """train_v2.py's objects for one process (its lines, in its order)."""
    plain = at.backbones.get_model(network, dropout=0.0, fp16=fp16, num_features=512).to(device)
    margin_loss = at.losses.CombinedMarginLoss(64, 1.0, 0.5, 0.0, 0)
    pfc = at.partial_fc_v2.PartialFC_V2(margin_loss, 512, classes, rate, False).train().to(device)
    opt = torch.optim.SGD(params=[{"params": plain.parameters()}, {"params": pfc.parameters()}],
                          lr=0.1, momentum=0.9, weight_decay=5e-4)
    cls, note = at.lr_scheduler.PolynomialLRWarmup, ""
    try:
        scheduler = cls(optimizer=opt, warmup_iters=0, total_iters=total_steps)
    except TypeError:  # it passes `verbose=` to LRScheduler, which newer torch no longer takes: its three
        # attributes are set and the base class built without it (get_lr and step are its own)
        scheduler = cls.__new__(cls)
        scheduler.total_iters, scheduler.power, scheduler.warmup_iters = total_steps, 1.0, 0
        torch.optim.lr_scheduler.LRScheduler.__init__(scheduler, opt)
        note = f"its PolynomialLRWarmup built without its verbose= argument (gone from torch {torch.__version__})"
    amp = torch.cuda.amp.grad_scaler.GradScaler(growth_interval=100, enabled=fp16)
    return plain, pfc, opt, scheduler, amp, note


def wrap(plain: nn.Module, device: str) -> nn.Module:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    ids = [torch.cuda.current_device()] if device == "cuda" else None
    backbone = nn.parallel.DistributedDataParallel(module=plain, broadcast_buffers=False, device_ids=ids,
                                                   bucket_cap_mb=16, find_unused_parameters=True)
    backbone.register_comm_hook(None, fp16_compress_hook)
    backbone.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # static graph makes find_unused_parameters redundant: theirs
        backbone._set_static_graph()
    return backbone


def run(at: SimpleNamespace, backbone_name: str, classes: int, rate: float, batches: list, warmup: int, steps: int,
        device: str, flops: bool, profiler=None) -> Measured:
    """Time arcface_torch's step at the row's backbone, batch and classes; a `profiler` records the timed steps."""
    network = NETWORKS.get(backbone_name)
    if network is None:
        raise ValueError(f"backbone {backbone_name} has no arcface_torch counterpart (it has {sorted(NETWORKS)})")
    fp16 = device == "cuda"
    batch = int(batches[0][0].shape[0])
    count = SYNC_STEPS if device == "cuda" else 0
    total = warmup + steps + count
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True  # train_v2.py's __main__
    ensure_process_group(device)
    memory = MemoryWatch(device)
    memory.start()
    torch.manual_seed(0)
    try:
        with its_cuda_calls_on(device), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # its torch.cuda.amp spellings
            plain, pfc, opt, scheduler, amp, note = build(at, network, classes, rate, device, fp16, total)
            flops_per_step = None
            if flops:  # on the plain backbone, before DDP's hooks exist; the gradients are then dropped
                images, labels = batches[0]
                flops_per_step = count_flops(lambda: pfc(plain(images), labels).backward())
                opt.zero_grad()
            backbone = wrap(plain, device)
            timer, syncs = StepTimer(warmup, steps, device, profiler), SyncCounter(device)
            losses = []
            for i in range(total):
                timer.before(i)
                if i == warmup + steps:
                    syncs.start()
                images, labels = batches[i % len(batches)]
                local_embeddings = backbone(images)
                loss = pfc(local_embeddings, labels)
                if fp16:
                    amp.scale(loss).backward()
                    amp.unscale_(opt)
                    nn.utils.clip_grad_norm_(backbone.parameters(), 5)
                    amp.step(opt)
                    amp.update()
                    opt.zero_grad()
                else:
                    loss.backward()
                    nn.utils.clip_grad_norm_(backbone.parameters(), 5)
                    opt.step()
                    opt.zero_grad()
                if scheduler is not None:
                    scheduler.step()
                with torch.no_grad():
                    losses.append(loss.item())  # train_v2.py: loss_am.update(loss.item(), 1)
                timer.after(i)
            syncs.stop()
    finally:
        torch.backends.cudnn.benchmark = benchmark
    measured = Measured(batch, timer.seconds, peak_mib=memory.peak_mib(), flops_per_step=flops_per_step,
                        losses=kept_losses(losses, warmup + steps - 1), note=note)
    if syncs.count is not None:
        measured.syncs_per_step = syncs.count / count
    return measured
