"""The vectorised verification protocol against a plain-loop implementation of insightface's
`calculate_roc` / `calculate_val` written here (bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.interpolate import BSpline, interp1d
from sklearn.model_selection import KFold
from sklearn.preprocessing import normalize

from elasticface.metrics.roc import far_key, roc_curve
from elasticface.metrics.verification import (
    VerificationAccuracy,
    evaluate_verification,
    far_threshold,
    kfold_bounds,
    verification_scores,
)


# --- straightforward reference: loops over folds and thresholds, sklearn KFold -------------------------


def _acc(threshold, dist, issame):
    predict = np.less(dist, threshold)
    tp = np.sum(np.logical_and(predict, issame))
    tn = np.sum(np.logical_and(np.logical_not(predict), np.logical_not(issame)))
    return float(tp + tn) / dist.size


def _val_far(threshold, dist, issame):
    predict = np.less(dist, threshold)
    ta = np.sum(np.logical_and(predict, issame))
    fa = np.sum(np.logical_and(predict, np.logical_not(issame)))
    return float(ta) / float(np.sum(issame)), float(fa) / float(np.sum(np.logical_not(issame)))


def slinear(x, y, x_new):
    """`interp1d(x, y, kind="slinear")(x_new)` as SciPy evaluated it before it refused repeated x
    (current SciPy does): interp1d built `BSpline(t=[x[0], *x, x[-1]], c=y, k=1)` and evaluated it."""
    order = np.argsort(x, kind="mergesort")
    x, y = np.asarray(x)[order], np.asarray(y)[order]
    if not x[0] <= x_new <= x[-1]:
        raise ValueError("A value in x_new is out of the interpolation range.")
    return float(BSpline(np.r_[x[0], x, x[-1]], y, 1)(x_new))


def reference(dist, issame, num_folds=10, far_target=1e-3):
    thresholds = np.arange(0, 4, 0.01)
    val_thresholds = np.arange(0, 4, 0.001)
    kf = KFold(n_splits=num_folds, shuffle=False)
    acc, best, tar = [], [], []
    for train, test in kf.split(np.arange(len(issame))):
        acc_train = [_acc(t, dist[train], issame[train]) for t in thresholds]
        b = int(np.argmax(acc_train))
        best.append(thresholds[b])
        acc.append(_acc(thresholds[b], dist[test], issame[test]))
        far_train = np.array([_val_far(t, dist[train], issame[train])[1] for t in val_thresholds])
        thr = slinear(far_train, val_thresholds, far_target) if far_train.max() >= far_target else 0.0
        tar.append(_val_far(thr, dist[test], issame[test])[0])
    acc = np.array(acc)
    return {"acc": np.mean(acc), "acc_std": np.std(acc), "threshold": np.mean(best), "tar": np.mean(tar),
            "accuracies": acc}


def _embeddings(num_pairs, dim=16, seed=0, noise=0.8):
    rng = np.random.default_rng(seed)
    issame = rng.random(num_pairs) < 0.5
    e1 = rng.normal(size=(num_pairs, dim))
    e2 = np.where(issame[:, None], e1 + noise * rng.normal(size=e1.shape), rng.normal(size=e1.shape))
    return e1, e2, issame


def _ref_dist(e1, e2):
    return np.sum(np.square(normalize(e1) - normalize(e2)), 1)


def _assert_same(got, ref):
    for key in ("acc", "acc_std", "threshold", "tar"):
        assert got[key] == ref[key], (key, got[key], ref[key])
    np.testing.assert_array_equal(got["accuracies"], ref["accuracies"])


# --- tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 37, 600, 6003])
def test_kfold_bounds_match_sklearn(n):
    ours = kfold_bounds(n, 10)
    theirs = [(int(t[0]), int(t[-1]) + 1) for _, t in KFold(10, shuffle=False).split(np.arange(n))]
    assert ours == theirs


@pytest.mark.parametrize("num_pairs,seed", [(600, 0), (613, 1), (97, 2)])
def test_matches_reference_bit_for_bit(num_pairs, seed):
    e1, e2, issame = _embeddings(num_pairs, seed=seed)
    got = evaluate_verification(e1, e2, issame)
    _assert_same(got, reference(_ref_dist(e1, e2), issame))
    assert 0.5 < got["acc"] <= 1.0


def test_ties_and_distances_exactly_on_thresholds():
    rng = np.random.default_rng(3)
    thresholds = np.arange(0, 4, 0.01)
    num_pairs = 503
    issame = rng.random(num_pairs) < 0.5
    # distances that sit exactly on grid thresholds (strict < matters) and repeat heavily (accuracy ties)
    k = np.where(issame, rng.integers(40, 120, num_pairs), rng.integers(90, 200, num_pairs))
    dist = thresholds[k]
    got = verification_scores(dist, issame)
    _assert_same(got, reference(dist, issame))
    # a perfectly separable set with a wide plateau of optimal thresholds: the first one wins
    dist = np.where(issame, 0.5, 2.0)
    got = verification_scores(dist, issame)
    ref = reference(dist, issame)
    _assert_same(got, ref)
    assert got["acc"] == 1.0 and got["threshold"] == pytest.approx(0.51)


def test_torch_inputs_and_unequal_folds():
    e1, e2, issame = _embeddings(605, seed=4)
    got = evaluate_verification(torch.from_numpy(e1).float(), torch.from_numpy(e2).float(), torch.from_numpy(issame))
    as_stored = [e.astype(np.float32).astype(np.float64) for e in (e1, e2)]
    ref = reference(_ref_dist(*as_stored), issame)
    _assert_same(got, ref)


def test_far_target_unreachable_gives_zero_threshold():
    issame = np.array([True, False] * 10)
    dist = np.where(issame, 0.1, 3.9999)  # no impostor is ever accepted on the grid, FAR never reaches 1e-3
    got = verification_scores(dist, issame)
    assert got["tar"] == 0.0 and np.all(got["val_thresholds"] == 0.0)


def test_slinear_oracle_is_interp1d_where_scipy_still_accepts_the_input():
    rng = np.random.default_rng(11)
    x = np.sort(rng.random(50))
    y = np.cumsum(rng.random(50))
    for t in np.r_[x[0], x[17], x[-1], rng.uniform(x[0], x[-1], 20)]:
        assert slinear(x, y, t) == float(interp1d(x, y, kind="slinear")(t))


def _far_curve(rng, n_imp, thresholds, decimals):
    """FAR(threshold) of `n_imp` impostor distances, ties on the grid when `decimals` is 3."""
    d = rng.uniform(0, rng.choice([0.05, 1.0, 4.0]), n_imp)
    d = np.round(d, decimals) if decimals is not None else d
    return np.array([np.sum(d < t) / n_imp for t in thresholds])


@pytest.mark.parametrize("seed", range(3))
def test_far_threshold_equals_insightface_interp1d_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    thresholds = np.arange(0, 4, 0.001)
    for trial in range(12):
        far = _far_curve(rng, int(rng.integers(5, 3000)), thresholds, 3 if trial % 2 else None)
        for target in (1e-6, 1e-3, 0.1, far[rng.integers(0, 4000)], far.max(), 0.5):
            want = slinear(far, thresholds, target) if far.max() >= target else 0.0
            assert far_threshold(far, thresholds, target) == want, (trial, target)


def reference_tars(dist, issame, far_targets, num_folds=10):
    """calculate_val's fold-mean TAR for several targets: FAR of every threshold counted by brute force."""
    val_thresholds = np.arange(0, 4, 0.001)
    tars = {t: [] for t in far_targets}
    for train, test in KFold(n_splits=num_folds, shuffle=False).split(np.arange(len(issame))):
        imp = dist[train][~issame[train]]
        far_train = (imp[None, :] < val_thresholds[:, None]).sum(1) / imp.size
        for t in far_targets:
            thr = slinear(far_train, val_thresholds, t) if far_train.max() >= t else 0.0
            tars[t].append(_val_far(thr, dist[test], issame[test])[0])
    return {t: np.mean(v) for t, v in tars.items()}


def test_tar_at_far_with_ties_many_impostors_and_few_genuine_pairs():
    """What training logs as val/<set>/tar_at_far_*: equal to calculate_val at FAR 1e-6 ... 1e-1."""
    rng = np.random.default_rng(12)
    num_pairs = 4000
    issame = rng.random(num_pairs) < 0.04
    # distances on the 0.001 grid (ties with each other and with the thresholds), genuine ones lower
    dist = np.round(
        np.clip(np.where(issame, rng.normal(1.0, 0.3, num_pairs), rng.normal(1.9, 0.25, num_pairs)), 0, 3.9), 3
    )
    targets = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
    want = reference_tars(dist, issame, targets)
    got = {t: verification_scores(dist, issame, far_target=t)["tar"] for t in targets}
    assert got == want
    assert 0 < got[1e-6] < got[1e-1] < 1


def test_target_equal_to_the_largest_far_gives_threshold_zero_as_insightface():
    """The one place where numpy.interp (the last threshold) and interp1d (0) really differ."""
    issame = np.tile([True, False, True, False], 50)
    # per 20-pair fold 10 impostors: half at 0.5, half beyond the last threshold 3.999, so the training
    # FAR stops at exactly 0.5 long before the last threshold
    dist = np.full(issame.size, 0.2)
    dist[~issame] = np.tile([0.5, 3.9995], 50)
    got = verification_scores(dist, issame, far_target=0.5)
    assert np.all(got["val_thresholds"] == 0.0) and got["tar"] == 0.0
    assert got["tar"] == reference_tars(dist, issame, [0.5])[0.5]
    # with numpy.interp the threshold would have been the last one and every genuine pair accepted
    far = np.array([np.mean(dist[:180][~issame[:180]] < t) for t in np.arange(0, 4, 0.001)])
    assert far.max() == 0.5 and np.interp(0.5, far, np.arange(0, 4, 0.001)) == 3.999


@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_roc_curve_matches_sklearn(drop_intermediate):
    from sklearn.metrics import roc_curve as sk_roc

    rng = np.random.default_rng(5)
    labels = rng.random(400) < 0.3
    scores = np.round(rng.normal(size=400) + labels, 1)  # many ties
    fpr, tpr, thr = roc_curve(scores, labels, drop_intermediate=drop_intermediate)
    sfpr, stpr, sthr = sk_roc(labels, scores, drop_intermediate=drop_intermediate)
    np.testing.assert_array_equal(fpr, sfpr)
    np.testing.assert_array_equal(tpr, stpr)
    np.testing.assert_array_equal(thr, sthr)


def test_far_key():
    assert far_key(1e-3) == "tar_at_far_1e-3"
    assert far_key(1e-4) == "tar_at_far_1e-4"


def _fused_dataset(num_pairs, seed):
    e1, e2, issame = _embeddings(num_pairs, dim=32, seed=seed)
    emb = np.empty((2 * num_pairs, 32))
    emb[0::2], emb[1::2] = e1, e2
    return torch.from_numpy(emb).float(), issame


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_metric_matches_functional_core_with_shuffled_batches_and_duplicates():
    emb, issame = _fused_dataset(203, seed=6)
    metric = VerificationAccuracy(issame)
    perm = torch.randperm(emb.shape[0], generator=torch.Generator().manual_seed(0))
    perm = torch.cat([perm, perm[:7]])  # DistributedSampler-style padding repeats some images
    for chunk in perm.split(50):
        metric.update(emb[chunk], chunk)
    out = metric.compute()
    assert set(out) == {"acc", "acc_std", "threshold", "tar_at_far_1e-3", "xnorm"}
    e = emb.double().numpy()
    ref = reference(_ref_dist(e[0::2], e[1::2]), issame)
    assert out["acc"].item() == ref["acc"] and out["acc_std"].item() == ref["acc_std"]
    assert out["threshold"].item() == ref["threshold"] and out["tar_at_far_1e-3"].item() == ref["tar"]
    assert out["xnorm"].item() == pytest.approx(np.linalg.norm(e, axis=1).mean())
    roc = metric.roc_data()
    assert roc["genuine"].shape[0] == issame.sum() and roc["impostor"].shape[0] == (~issame).sum()
    assert roc["fpr"][0] == 0.0 and roc["fpr"][-1] == 1.0 and roc["tpr"][-1] == 1.0
    metric.reset()
    with pytest.raises(RuntimeError, match="update"):
        metric.compute()


def test_metric_missing_images_error():
    emb, issame = _fused_dataset(20, seed=7)
    metric = VerificationAccuracy(issame)
    metric.update(emb[:-3], torch.arange(emb.shape[0] - 3))
    with pytest.raises(ValueError, match="3 of 40 images"):
        metric.compute()
    metric = VerificationAccuracy(issame)
    metric.update(emb, torch.arange(emb.shape[0]) + 1)
    with pytest.raises(ValueError, match="indices must lie"):
        metric.compute()


@pytest.mark.filterwarnings("ignore:VerificationAccuracy")
def test_partial_validation_scores_the_complete_pairs_it_has():
    """fast_dev_run / overfit_batches / limit_val_batches: the protocol on the pairs with both images seen."""
    emb, issame = _fused_dataset(200, seed=8)
    metric = VerificationAccuracy(issame, allow_partial=True)
    seen = torch.cat([torch.arange(0, 241), torch.arange(250, 380), torch.tensor([395])])  # pairs 120, 197 half
    metric.update(emb[seen], seen)
    out = metric.compute()
    pairs = np.array([i for i in range(200) if 2 * i in seen and 2 * i + 1 in seen])
    assert len(pairs) == 185
    e = emb.double().numpy()
    ref = reference(_ref_dist(e[2 * pairs], e[2 * pairs + 1]), issame[pairs])
    assert out["acc"].item() == ref["acc"] and out["threshold"].item() == ref["threshold"]
    few = VerificationAccuracy(issame, allow_partial=True)
    few.update(emb[:12], torch.arange(12))  # 6 complete pairs < 10 folds: NaN with a warning, no crash
    with pytest.warns(UserWarning, match="only 6 of 200 pairs complete"):
        assert torch.isnan(few.compute()["acc"])
    with pytest.raises(ValueError, match="ROC"):
        few.roc_data()


def test_metric_ddp_like_state_concatenation():
    """Two 'ranks' see interleaved shards (DistributedSampler order, padded); their gathered states
    (what dist_reduce_fx='cat' produces) give the same numbers as one process."""
    emb, issame = _fused_dataset(101, seed=8)  # 202 images: padded to 204 over 2 ranks
    world = 2
    order = torch.arange(emb.shape[0])
    order = torch.cat([order, order[: (-emb.shape[0]) % world]])
    ranks = [VerificationAccuracy(issame) for _ in range(world)]
    for r, metric in enumerate(ranks):
        shard = order[r::world]
        for chunk in shard.split(16):
            metric.update(emb[chunk], chunk)

    def gather(tensor, group=None):  # stands in for torch.distributed.all_gather
        name = "embeddings" if tensor.ndim == 2 else "indices"
        return [torch.cat(getattr(m, name)) if isinstance(getattr(m, name), list) else getattr(m, name) for m in ranks]

    merged = VerificationAccuracy(issame, dist_sync_fn=gather, distributed_available_fn=lambda: True)
    merged.update(emb[:1], torch.tensor([0]))  # its own states are replaced by the gather
    got = merged.compute()
    single = VerificationAccuracy(issame)
    single.update(emb, torch.arange(emb.shape[0]))
    want = single.compute()
    for key in want:
        assert got[key].item() == want[key].item(), key


# --- the plotting callback ------------------------------------------------------------------------------


def _tiny_lightning_run(tmp_path, loggers):
    import pytorch_lightning as pl
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from elasticface.callbacks.verification_plots import VerificationPlots

    emb, issame = _fused_dataset(30, seed=9)

    from types import SimpleNamespace

    from elasticface.classifier import ClassifierOutput

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(32, 32)
            self.head = SimpleNamespace(normalized=True)
            self.val_metrics = nn.ModuleDict({"toy": VerificationAccuracy(issame)})

        def training_step(self, batch, batch_idx):
            out = self.layer(batch[0])
            rows = out.shape[0]
            loss = out.pow(2).mean()
            return {"loss": loss, "classifier": ClassifierOutput(
                loss=loss.detach(), aux=None, theta_y=torch.rand(rows) * 1.5, valid=torch.ones(rows, dtype=torch.bool),
                margins=torch.full((rows,), 0.5) + 0.05 * torch.randn(rows), target_logit=torch.zeros(rows))}

        def validation_step(self, batch, batch_idx):
            self.val_metrics["toy"].update(batch[0] + 0 * self.layer.weight.sum(), batch[1])

        def on_validation_epoch_end(self):
            if self.trainer.sanity_checking:  # a partial pass over the set: the metric would refuse it
                for metric in self.val_metrics.values():
                    metric.reset()
                return
            for name, metric in self.val_metrics.items():
                self.log(f"val/{name}/acc", metric.compute()["acc"])
                metric.reset()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    data = DataLoader(TensorDataset(emb, torch.arange(emb.shape[0])), batch_size=16)
    trainer = pl.Trainer(max_epochs=2, logger=loggers, callbacks=[VerificationPlots(every_n_val=1)],
                         log_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False,
                         num_sanity_val_steps=1, default_root_dir=str(tmp_path), accelerator="cpu")
    trainer.fit(Module(), data, data)
    return trainer


def test_verification_plots_callback_tensorboard_and_csv(tmp_path):
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = TensorBoardLogger(str(tmp_path), name="tb", version="")
    _tiny_lightning_run(tmp_path, [tb, CSVLogger(str(tmp_path), name="csv")])
    acc = EventAccumulator(tb.log_dir, size_guidance={"images": 0, "histograms": 0})
    acc.Reload()
    images = acc.Tags()["images"]
    assert "val/toy/roc" in images and "val/toy/scores" in images
    assert len(acc.Images("val/toy/roc")) == 2  # two validations, sanity check skipped
    assert {"train/margins", "train/theta_y_deg"} <= set(acc.Tags()["histograms"])


def test_verification_plots_routes_to_wandb(monkeypatch):
    from pytorch_lightning.loggers import CSVLogger, WandbLogger

    from elasticface.callbacks.verification_plots import log_figure, log_histogram
    from elasticface.eval.plots import roc_figure

    calls = []
    monkeypatch.setattr(WandbLogger, "log_image",
                        lambda self, key, images, step=None, **kw: calls.append(("image", key, step)))
    monkeypatch.setattr(WandbLogger, "log_metrics",
                        lambda self, metrics, step=None: calls.append(("metrics", sorted(metrics), step)))
    logger = WandbLogger(offline=True, project="test")
    fig = roc_figure({"a": (np.array([0.0, 0.1, 1.0]), np.array([0.0, 0.8, 1.0]))})
    assert log_figure(logger, "val/a/roc", fig, 7)
    assert log_histogram(logger, "train/margins", np.array([0.5, 0.6]), 7)
    assert calls == [("image", "val/a/roc", 7), ("metrics", ["train/margins"], 7)]
    assert not log_figure(CSVLogger("."), "x", fig, 0)


_DDP_SCRIPT = r'''
import os, sys
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from elasticface.metrics.verification import VerificationAccuracy

def worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rng = np.random.default_rng(0)
    issame = rng.random(53) < 0.5
    emb = torch.from_numpy(rng.normal(size=(106, 8))).float()
    emb[1::2][torch.from_numpy(issame)] += emb[0::2][torch.from_numpy(issame)] * 2
    order = torch.arange(106)
    order = torch.cat([order, order[: (-106) % world]])  # DistributedSampler padding
    metric = VerificationAccuracy(issame)
    for chunk in order[rank::world].split(10):
        metric.update(emb[chunk], chunk)
    roc = metric.roc_data()          # a collective on every rank
    got = metric.compute()           # a second, cached, sync
    single = VerificationAccuracy(issame, sync_on_compute=False)
    single.update(emb, torch.arange(106))
    want = single.compute()
    ok = all(got[k].item() == want[k].item() for k in want) and roc["genuine"].shape[0] == issame.sum()
    with open(f"{out}.{rank}", "w") as f:
        f.write("ok" if ok else f"{got} != {want}")
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(3, int(sys.argv[1]), sys.argv[2]), nprocs=3)
'''


@pytest.mark.slow
def test_metric_real_ddp_gloo(tmp_path):
    """Three gloo processes with padded, interleaved shards agree with a single process."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "ddp.py"
    script.write_text(_DDP_SCRIPT)
    out = tmp_path / "res"
    proc = subprocess.run([sys.executable, str(script), str(port), str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(tmp_path / f"res.{r}").read_text() for r in range(3)] == ["ok"] * 3


def test_plot_functions_return_figures():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from elasticface.eval.plots import roc_figure, score_histogram, value_histogram

    emb, issame = _fused_dataset(40, seed=10)
    metric = VerificationAccuracy(issame)
    metric.update(emb, torch.arange(emb.shape[0]))
    c = metric.roc_data()
    figs = [roc_figure({"toy": (c["fpr"], c["tpr"]), "toy2": (c["fold_fpr"], c["fold_tpr"])}),
            score_histogram(c["genuine"], c["impostor"], threshold=0.3),
            value_histogram(np.random.rand(50), "m", "margin")]
    for fig in figs:
        assert isinstance(fig, Figure) and fig.axes
        plt.close(fig)
