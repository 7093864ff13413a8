"""Representative evaluation (issue 44 part 1): a seeded sample of windows spread over the whole split.

Checked against independent computations: a unigram scorer whose full-split NLL is a plain numpy sum, a
split whose first documents are atypical, and a brute-force count of the documents the windows touch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tlm_probe.data.stream import eval_documents, eval_windows
from tlm_probe.data.windows import documents_covered, pick, ratio_stderr
from tlm_probe.eval.perplexity import perplexity

EOS, V, L = 0, 64, 32


def atypical_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(ids, unigram probabilities): 400 documents of 40-300 ids drawn from the unigram model, except the
    first 40, which repeat one frequent id (a generated table stored first, as in the real test split)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.5))
    p[EOS] = 0.0
    p[1] = 0.3
    p /= p.sum()
    docs = [np.full(rng.integers(40, 300), 1) if d < 40 else rng.choice(V, rng.integers(40, 300), p=p)
            for d in range(400)]
    ids = np.concatenate([np.append(d, EOS) for d in docs]).astype(np.int64)
    p[EOS] = 1.0 / len(docs)  # the end-of-text id is predicted too
    return ids, p / p.sum()


class Unigram:
    """A scorer (the parts perplexity() reads) whose every position predicts the same distribution."""

    def __init__(self, p: np.ndarray):
        self.logp = torch.from_numpy(np.log(p)).float()
        self.max_length, self.batch_size = L, 16
        self.codec = SimpleNamespace(n_bytes=lambda ids: len(ids), eos_id=EOS)
        self.pm = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(vocab_size=V)))

    def logits(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logp.expand(*ids.shape, V)


def full_split_nll(ids: np.ndarray, p: np.ndarray) -> float:
    """Mean -log p over every target the grid of disjoint windows scores: ids 1 .. n_windows·L."""
    n_windows = len(range(0, len(ids) - L, L))
    targets = ids[1 : 1 + n_windows * L]
    return float(-np.log(p[targets].astype(np.float32).astype(np.float64)).mean())


def test_spread_sample_is_within_its_ci_of_the_full_split_and_the_prefix_is_not():
    ids, p = atypical_split()
    truth = full_split_nll(ids, p)
    scorer = Unigram(p)
    budget = len(ids) // 10
    spread = perplexity(scorer, ids, source="x", split="test", max_tokens=budget)
    prefix = perplexity(scorer, ids, source="x", split="test", max_tokens=budget, sample="prefix")
    assert spread.n_tokens == prefix.n_tokens
    assert abs(spread.loss - truth) < 1.96 * spread.stderr
    assert abs(prefix.loss - truth) > 20 * spread.stderr  # the first documents are far from typical
    assert prefix.stderr is None  # a prefix is not a random sample: no sampling error is claimed
    # the documents covered are stated: the spread sample reaches most documents, the prefix few
    assert spread.documents_split == prefix.documents_split == 400
    assert spread.documents > 100 and prefix.documents <= 45
    everything = perplexity(scorer, ids, source="x", split="test", max_tokens=None)
    assert everything.loss == pytest.approx(truth, rel=1e-6)
    assert everything.stderr is None  # every window scored: no sampling error


def test_spread_interval_covers_the_full_split_at_its_nominal_rate():
    ids, p = atypical_split(1)
    truth = full_split_nll(ids, p)
    scorer = Unigram(p)
    hits = [abs(r.loss - truth) < 1.96 * r.stderr
            for r in (perplexity(scorer, ids, source="x", split="test", max_tokens=len(ids) // 8, seed=s)
                      for s in range(60))]
    assert 0.85 <= np.mean(hits) <= 1.0  # nominal 0.95; 60 draws: 0.85 is > 3 binomial SDs below it


def test_ratio_stderr_equals_the_textbook_formula():
    rng = np.random.default_rng(0)
    y, x = rng.gamma(2.0, 1.0, 30), np.full(30, 32.0)
    r = y.sum() / x.sum()
    direct = np.sqrt((1 - 30 / 300) * np.var(y / 32.0, ddof=1) / 30)  # equal counts: a mean of window means
    assert ratio_stderr(y, x, 300) == pytest.approx(direct, rel=1e-12)
    assert ratio_stderr(y, x, 30) == 0.0 and r > 0
    assert ratio_stderr(y[:1], x[:1], 300) is None


def test_documents_covered_equals_a_brute_force_count():
    ids, _ = atypical_split(2)
    doc_of = np.concatenate([[0], np.cumsum(ids == EOS)[:-1]])  # each id's document: ends at its EOS
    rng = np.random.default_rng(3)
    for _ in range(20):
        spans = [(int(a), int(a) + int(rng.integers(0, 500))) for a in rng.integers(0, len(ids) - 600, 7)]
        touched = {int(d) for a, b in spans for d in doc_of[a : b + 1]}
        assert documents_covered(ids, spans, EOS) == (len(touched), 400)
    assert documents_covered(ids, [(0, 5)], None) is None


def test_trainer_eval_set_is_spread_seeded_and_the_same_for_every_model():
    ids, _ = atypical_split()
    a = eval_windows(ids, L, 40 * L)
    assert torch.equal(a, eval_windows(ids, L, 40 * L))  # no dependence on anything but the split
    starts = [int(np.flatnonzero((np.lib.stride_tricks.sliding_window_view(ids, L + 1) == row.numpy())
                                 .all(1))[0]) for row in a[:3]]
    assert all(s % L == 0 for s in starts)  # windows of the grid
    grid = (len(ids) - 1) // L
    chosen = pick(grid, 40, "spread")
    assert chosen.max() > grid // 2 and len(set(chosen.tolist())) == 40  # across the split, no repeats
    prefix = eval_windows(ids, L, 40 * L, sample="prefix")
    assert torch.equal(prefix[0], torch.from_numpy(ids[: L + 1]))
    covered, total = eval_documents(ids, L, 40 * L, SimpleNamespace(eos_id=EOS))
    assert total == 400 and covered > eval_documents(ids, L, 40 * L, SimpleNamespace(eos_id=EOS),
                                                     "prefix")[0]


def test_unknown_sample_is_one_line():
    from tlm_probe.errors import UserError
    from tlm_probe.eval.run import EvalOptions

    with pytest.raises(UserError, match="--sample must be one of spread, prefix"):
        EvalOptions(sample="first")
