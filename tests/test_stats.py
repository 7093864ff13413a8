"""Streaming moments and pieces against direct numpy/scipy computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats as sps

from tlm_probe.errors import UserError
from tlm_probe.stats.alignment import build_accumulators
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import LayerPieces, TokenIndex


def _random_sequences(seed: int, n_seq: int = 9):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, n_seq)
    return [rng.normal(0.3 * i, 1.0, n) for i, n in enumerate(lengths)]


def _feed(m: SequenceMoments, seqs) -> None:
    values = torch.tensor(np.concatenate(seqs))
    seq = torch.tensor(np.repeat(np.arange(len(seqs)), [len(s) for s in seqs]))
    m.add(0, values, seq, len(seqs))


def test_moments_mean_std_and_cluster_ci():
    seqs = _random_sequences(0)
    m = SequenceMoments(1)
    _feed(m, seqs)
    s = m.summary(0)
    flat = np.concatenate(seqs)
    assert s["value"] == pytest.approx(flat.mean(), rel=1e-12)
    assert s["std"] == pytest.approx(flat.std(ddof=1), rel=1e-12)
    # cluster (ratio-estimator) standard error written out from residuals, not from running sums
    x = np.array([q.sum() for q in seqs])
    n = np.array([len(q) for q in seqs])
    S, mean = len(seqs), x.sum() / n.sum()
    se = np.sqrt(S / (S - 1) * ((x - mean * n) ** 2).sum()) / n.sum()
    half = sps.t.ppf(0.975, S - 1) * se
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((mean - half, mean + half), rel=1e-10)


def test_equal_length_ci_is_t_interval_of_sequence_means():
    rng = np.random.default_rng(1)
    seqs = [rng.normal(size=5) for _ in range(7)]
    m = SequenceMoments(1)
    _feed(m, seqs)
    means = np.array([q.mean() for q in seqs])
    lo, hi = sps.t.interval(0.95, len(means) - 1, loc=means.mean(), scale=sps.sem(means))
    s = m.summary(0)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((lo, hi), rel=1e-10)


def test_merging_equals_one_pass():
    seqs = _random_sequences(2, 12)
    one, a, b = SequenceMoments(1), SequenceMoments(1), SequenceMoments(1)
    _feed(one, seqs)
    _feed(a, seqs[:5])
    _feed(b, seqs[5:])
    a.merge(b)
    assert torch.allclose(a.state, one.state, rtol=1e-12)
    assert a.summary(0) == pytest.approx(one.summary(0))


def test_empty_slot_is_nan_with_zero_tokens():
    s = SequenceMoments(2).summary(1)
    assert s["n_tokens"] == 0 and np.isnan(s["value"])


def test_pieces_cos_matches_torch_and_skips_padding():
    torch.manual_seed(0)
    a, b = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    idx = TokenIndex(mask, exclude_bos=True)
    p = LayerPieces(0, {"a": a, "b": b}, idx)
    want = F.cosine_similarity(a.double(), b.double(), dim=-1)[idx.counted]
    assert torch.allclose(p.cos("a", "b"), want, atol=1e-12)
    assert idx.seq.tolist() == [0, 0, 1, 1, 1, 1]
    assert torch.allclose(p.ratio("a", "b"), (a.norm(dim=-1) / b.norm(dim=-1)).double()[idx.counted])


def test_stat_selection_and_unknown_names():
    (acc,) = build_accumulators("align_mlp_mid,block_influence", 3, (8, 8, 8))
    assert acc.statistics == ("align_mlp_mid", "block_influence")
    assert acc.needs == {"mlp_out", "resid_mid", "resid_pre", "resid_post"}
    with pytest.raises(UserError, match="unknown statistic 'nope'"):
        build_accumulators("nope", 3, (8, 8, 8))


NAMES = ("align_mlp_mid", "resid_norm_growth", "attn_influence")


def _two_batches():
    torch.manual_seed(2)
    batches = []
    for mask in (torch.ones(2, 6), torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1] * 6])):
        index = TokenIndex(mask.long(), exclude_bos=True)
        layers = []
        for layer in range(3):
            pre, attn, mlp = (torch.randn(*mask.shape, 8) for _ in range(3))
            raw = {"resid_pre": pre, "attn_out": attn, "resid_mid": pre + attn, "mlp_out": mlp}
            layers.append(LayerPieces(layer, {**raw, "resid_post": pre + attn + mlp}, index))
        batches.append(layers)
    return batches


def _one_by_one(batches) -> SequenceMoments:
    from tlm_probe.stats.alignment import PER_TOKEN

    want = SequenceMoments(len(NAMES) * 3)
    for p in (p for layers in batches for p in layers):
        for i, name in enumerate(NAMES):
            want.add(i * 3 + p.layer, PER_TOKEN[name][1](p), p.index.seq, p.index.n_seq)
    return want


@pytest.mark.parametrize("end_batches", [True, False])
def test_accumulator_defers_each_batch_and_flushes_before_it_is_read(end_batches):
    """Layers of one batch are computed together when the batch ends; a caller that never ends a batch
    (or reads the rows mid-batch) still gets every batch, each with its own token index, never mixed."""
    batches = _two_batches()
    want = _one_by_one(batches)
    (acc,) = build_accumulators(",".join(NAMES), 3, (8, 8, 8))
    for layers in batches:
        for p in layers:
            acc.update(p.layer, p)
        if end_batches:
            acc.end_layers()
    got = {(r["statistic"], r["layer"]): r for r in acc.rows()}
    for i, name in enumerate(NAMES):
        for layer in range(3):
            expect, row = want.summary(i * 3 + layer), got[(name, layer)]
            assert row["n_tokens"] == expect["n_tokens"] == 5 * 2 + 3 + 1 + 5
            for key in ("value", "std", "ci_low", "ci_high"):
                assert row[key] == pytest.approx(expect[key], rel=1e-12, abs=1e-15)
