"""IJB-B/C 1:N: insightface's ijb_1n.py rule (G1 + G2 gallery, mixed probes, rank-N, TPIR at FPIR) against loops
written from its description, on random features and on the synthetic IJB folder the 1:1 tests use."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import compose_eval
from elasticface.eval.ijb import evaluate_ijb
from elasticface.eval.identification.gallery_search import gallery_search
from helpers.ijb_files import ColourEmbedder, make_ijb, reference_templates, write_1n_lists


def oracle(probes, mates, gallery, ranks=(1, 5, 10), fpirs=(0.01, 0.1)):
    """Per probe: the gallery sorted by score, highest first (the mate first among equal scores); the mate's place
    gives rank-k. Every non-mate score of every probe in one list, sorted descending; the threshold at FPIR f is
    its ceil(P f)-th entry, and TPIR counts the mates scoring strictly above it."""
    n = len(probes)
    places, mate_scores, non_mates = [], [], []
    for p, m in zip(probes, mates):
        scores = [float(np.dot(p, g)) for g in gallery]
        order = sorted(range(len(gallery)), key=lambda j: (-scores[j], j != m))
        places.append(order.index(m) + 1)
        mate_scores.append(scores[m])
        non_mates += [s for j, s in enumerate(scores) if j != m]
    non_mates.sort(reverse=True)
    out = {f"rank{k}": sum(pl <= k for pl in places) / n for k in ranks}
    for f in fpirs:
        threshold = non_mates[math.ceil(n * f) - 1]
        out[f"tpir_at_fpir_{f:.0e}".replace("e-0", "e-")] = sum(s > threshold for s in mate_scores) / n
    return out


@pytest.mark.parametrize("seed,batch", [(0, 4096), (1, 37), (2, 1)])
def test_gallery_search_equals_the_oracle(seed, batch):
    rng = np.random.default_rng(seed)
    gallery = rng.normal(size=(60, 16))
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    mates = rng.integers(0, 60, 400)
    probes = gallery[mates] + rng.normal(0, 0.3 + 0.1 * seed, (400, 16))
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)
    got = gallery_search(probes, mates, gallery, fpirs=(0.01, 0.1), batch=batch)
    want = oracle(probes, mates, gallery)
    assert got == pytest.approx(want, abs=0)
    assert 0 < got["rank1"] < got["rank10"] < 1 and got["tpir_at_fpir_1e-2"] < got["tpir_at_fpir_1e-1"]


def test_ties_with_the_mate_do_not_push_it_down():
    gallery = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    got = gallery_search(np.array([[1.0, 0.0]]), np.array([1]), gallery, ranks=(1,), fpirs=(0.5,))
    assert got == oracle([[1.0, 0.0]], [1], gallery, ranks=(1,), fpirs=(0.5,)) == {"rank1": 1.0,
                                                                                     "tpir_at_fpir_5e-1": 0.0}


def test_ijb_1n_on_the_synthetic_folder(tmp_path):
    base = make_ijb(str(tmp_path))
    probes, gallery = write_1n_lists(base)
    model = ColourEmbedder()
    res = evaluate_ijb(model, str(tmp_path), "IJBC", batch_size=4, device="cpu", verification=False,
                       identification=True)["identification"]
    templates = reference_templates(base, "IJBC", model)
    g_ids = sorted(gallery)
    want = oracle([templates[t] for t in probes], [g_ids.index(10 * s + 1) for s in probes.values()],
                  [templates[t] for t in g_ids])
    assert {k: v for k, v in res.items() if k.startswith(("rank", "tpir"))} == pytest.approx(want, abs=1e-12)
    assert res["probes"] == 4 and res["gallery"] == 4
    assert len(res["problems"]) == 1 and "subject has no gallery template" in res["problems"][0]


def test_eval_ijb_protocol_both(tmp_path):
    from elasticface.eval.run import evaluate
    from elasticface.export import export_torchscript

    base = make_ijb(str(tmp_path / "ijb"))
    write_1n_lists(base)
    export_torchscript(ColourEmbedder().eval(), str(tmp_path / "model.pt"))
    cfg = compose_eval([f"weights={tmp_path / 'model.pt'}", "allow_torchscript=true", f"ijb.root={tmp_path / 'ijb'}",
                        "ijb.protocol=both", "device=cpu", "num_workers=0", "plots=false"])
    rows = evaluate(cfg, output_dir=str(tmp_path / "out"))
    assert [r["benchmark"] for r in rows] == ["IJBC", "IJBC 1:N"]
    assert set(rows[1]) >= {"rank1", "rank5", "rank10", "tpir_at_fpir_1e-2", "tpir_at_fpir_1e-1"}
    with pytest.raises(ValueError, match="ijb.protocol"):
        evaluate(compose_eval([f"weights={tmp_path / 'model.pt'}", "allow_torchscript=true",
                               f"ijb.root={tmp_path / 'ijb'}", "ijb.protocol=11", "device=cpu"]),
                 output_dir=str(tmp_path / "bad"))
