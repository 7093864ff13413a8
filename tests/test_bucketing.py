"""Length bucketing: same sequences, less padding, identical probe statistics."""

import numpy as np
import pytest
from models_zoo import CORPUS, build_model

from tlm_probe.data.bucketing import bucket_by_length, padding_fraction
from tlm_probe.probe.engine import ProbeOptions, run_probe
from tlm_probe.probe.stream import order_free
from tlm_probe.stats.alignment import build_accumulators

DOCS = [" ".join(CORPUS[i % len(CORPUS)] for i in range(n)) for n in range(1, 12, 2)] * 2


def test_same_sequences_sorted_within_bounded_windows():
    rng = np.random.default_rng(0)
    seqs = [list(range(int(n))) for n in rng.integers(1, 50, 103)]
    out = list(bucket_by_length(iter(seqs), batch_size=4, window=5))
    assert sorted(map(len, out)) == sorted(map(len, seqs))
    for start in range(0, 103, 20):  # each window of 4 x 5 holds the same sequences, longest first
        chunk = out[start : start + 20]
        assert sorted(map(len, chunk)) == sorted(map(len, seqs[start : start + 20]))
        assert [len(s) for s in chunk] == sorted((len(s) for s in chunk), reverse=True)
    lengths = [len(s) for s in seqs]
    assert padding_fraction([len(s) for s in out], 4) < padding_fraction(lengths, 4)
    assert padding_fraction([3, 1, 2, 2], 2) == pytest.approx(1 - 8 / 10)  # batches (3,1) and (2,2)


def test_only_order_free_statistics_are_bucketed():
    accs = build_accumulators("alignment", 2, (8, 8))
    assert order_free(ProbeOptions(), accs)
    assert not order_free(ProbeOptions(length_bucketing=False), accs)
    assert not order_free(ProbeOptions(), [*accs, object()])  # one without the promise: reading order
    assert not order_free(ProbeOptions(), accs, keep=512)  # the importance pass keeps the first sequences


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_bucketing_changes_no_statistic(tmp_path, family):
    folder = build_model(family, tmp_path / family)
    kw = dict(data=DOCS, seq_len=24, batch_size=4, max_tokens=None)
    on = run_probe(str(folder), ProbeOptions(**kw)).table
    off = run_probe(str(folder), ProbeOptions(**kw, length_bucketing=False)).table
    assert (on.n_tokens == off.n_tokens).all() and (on.statistic == off.statistic).all()
    # equal up to the float32 rounding of a forward pass whose padded length changed (other matrix shapes,
    # so other float32 kernels and sums): 8 float32 eps x max(1, |value|), the bound of tests/test_golden.py
    # (a cosine's rounding is relative to the norms, not to the cosine: absolute near 0). Measured 1e-9.
    eps8 = 8 * float(np.finfo(np.float32).eps)
    for col in ("value", "std", "ci_low", "ci_high"):
        np.testing.assert_allclose(on[col], off[col], rtol=eps8, atol=eps8)
