"""experiment=released/...'s first steps equal the released ElasticFace training loop (fdbtrs/ElasticFace 5496ec0,
train.py), transcribed here in plain PyTorch independently of the module: the same start weights, batches and
drawn margins (the module's draws, recorded: the released "+" assignment is tested with the heads), across an
epoch boundary so that the per-epoch lr decay is exercised. The module runs in a real Lightning Trainer on the
CPU; the transcription is the released loop written out."""

import copy

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from conftest import compose_train

from elasticface import batch_scaling
from elasticface.training import build_module

CLASSES, BATCH, STEPS_PER_EPOCH, EPOCHS = 5, 4, 3, 2
#: epoch milestones lowered to 2 so that the second of two epochs runs decayed (the rule is config.py:50-52's)
MILESTONES = [2]


def released_lr_func(epoch: int) -> float:
    # config/config.py:50-52: lr x 0.1 for each milestone m with m - 1 <= epoch
    return 0.1 ** len([m for m in MILESTONES if m - 1 <= epoch])


def released_logits(arc: bool, emb: torch.Tensor, kernel: torch.Tensor, labels: torch.Tensor, margins: torch.Tensor,
                    s: float) -> torch.Tensor:
    """utils/losses.py's ElasticArcFace / ElasticCosFace forward with the drawn margins given: features normalised
    (train.py:158), cos θ clamped to [-1, 1]; Arc: acos, + m_i at the target, cos, x s (no guard, losses.py:52-54);
    Cos: - m_i at the target, x s (losses.py:86-87)."""
    emb = F.normalize(emb, dim=1)
    kernel_norm = F.normalize(kernel, dim=0)
    cos_theta = torch.mm(emb, kernel_norm).clamp(-1, 1)
    m_hot = torch.zeros_like(cos_theta).scatter_(1, labels[:, None], margins[:, None])
    return (torch.cos(torch.acos(cos_theta) + m_hot) if arc else cos_theta - m_hot) * s


class Record(pl.Callback):
    """The module's loss and drawn margins at each step, and its weights before the first step."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.margins: list[torch.Tensor] = []
        self.lrs: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        out = outputs["classifier"]  # what the training step returns: the class layer's output
        self.margins.append(out.margins[out.valid].detach().clone())


@pytest.mark.parametrize("experiment", ["released/ms1mv2_r100_elastic_arc", "released/ms1mv2_r100_elastic_cos_plus"])
def test_the_modules_first_steps_equal_the_released_loop(experiment, tmp_path):
    cfg = compose_train([f"experiment={experiment}", "data.root=/unused", "backbone=tiny", "model.embedding_size=16",
                         "model.compile=false",  # the transcription is eager; compile would be a second difference
                         "trainer.devices=1", f"data.batch_size={BATCH}", f"scheduler.milestones={MILESTONES}"],
                        tmp_path)
    batch_scaling.apply(cfg)
    torch.manual_seed(0)
    module = build_module(cfg, CLASSES)
    assert module.head.guard == "none"
    arc = "_arc" in experiment
    backbone = copy.deepcopy(module.backbone)
    kernel = module.centers.weight.detach().clone().t().contiguous().requires_grad_(True)  # released: [D, C]

    g = torch.Generator().manual_seed(1)
    images = torch.rand(BATCH * STEPS_PER_EPOCH, 3, 112, 112, generator=g) * 2 - 1
    labels = torch.randint(0, CLASSES, (BATCH * STEPS_PER_EPOCH,), generator=g)
    record = Record()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, callbacks=[record])
    trainer.fit(module, train_dataloaders=DataLoader(TensorDataset(images, labels), batch_size=BATCH))
    assert trainer.global_step == STEPS_PER_EPOCH * EPOCHS

    # train.py:110: lr = cfg.lr / 512 * cfg.batch_size * world_size; train.py:108-115: two SGD, momentum 0.9, wd 5e-4
    lr = 0.1 / 512 * BATCH * 1
    opt_backbone = torch.optim.SGD([{"params": backbone.parameters()}], lr=lr, momentum=0.9, weight_decay=5e-4)
    opt_header = torch.optim.SGD([{"params": [kernel]}], lr=lr, momentum=0.9, weight_decay=5e-4)
    # train.py:117-120: a LambdaLR per optimizer, stepped once per epoch (train.py:177-178)
    scheduler_backbone = torch.optim.lr_scheduler.LambdaLR(opt_backbone, released_lr_func)
    scheduler_header = torch.optim.lr_scheduler.LambdaLR(opt_header, released_lr_func)
    backbone.train()
    losses, lrs, step = [], [], 0
    for _epoch in range(EPOCHS):
        for i in range(STEPS_PER_EPOCH):
            img, label = images[i * BATCH:(i + 1) * BATCH], labels[i * BATCH:(i + 1) * BATCH]
            lrs.append(opt_backbone.param_groups[0]["lr"])
            thetas = released_logits(arc, backbone(img), kernel, label, record.margins[step], 64.0)
            loss_v = F.cross_entropy(thetas, label)
            loss_v.backward()
            torch.nn.utils.clip_grad_norm_(backbone.parameters(), max_norm=5, norm_type=2)  # train.py:164
            opt_backbone.step()
            opt_header.step()
            opt_backbone.zero_grad()
            opt_header.zero_grad()
            losses.append(loss_v.item())
            step += 1
        scheduler_backbone.step()
        scheduler_header.step()

    assert lrs == pytest.approx(record.lrs, rel=1e-12)
    assert lrs[STEPS_PER_EPOCH] == pytest.approx(lrs[0] * 0.1)  # the second epoch runs decayed
    assert record.losses == pytest.approx(losses, rel=1e-5)
    for (name, ours), theirs in zip(module.backbone.named_parameters(), backbone.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=lambda m: f"backbone {name}: {m}")
    torch.testing.assert_close(module.centers.weight.detach().t(), kernel.detach(), rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(module.backbone.buffers(), backbone.buffers(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
