"""Which windows of a split are scored when only some are: `spread` (the default) or `prefix`.

A split's ids are cut into a grid of windows (the trainer: consecutive windows of seq_len + 1 ids that
overlap by one; `tlm eval`: windows of context + 1 ids every `stride` ids). When fewer tokens are asked
for than the split holds, k windows of the grid are scored:

- spread: k windows drawn uniformly without replacement from every window of the split with
  numpy.random.default_rng([seed, STREAM]), scored in position order. Every window is equally likely, so
  the summed NLL over the summed count is a (ratio) estimate of the whole split's mean NLL per token, and
  its standard error over windows (finite-population corrected) comes with it. The draw depends only on
  the number of windows, k and the seed: every model scored on the same split sees the same windows.
- prefix: the first k windows (the behaviour before issue 44): the split's first documents only, which in
  a corpus stored in order are a few files of a few packages. Kept as an explicit option.

`documents_covered` says how many of the split's documents the scored windows touch, recorded beside every
sampled number. Documents are counted by the tokenizer's end-of-text id that ends each (None without one),
so a document whose text holds that token itself counts twice (builtin:env's validation split: 1,238 by
this count, 1,232 files).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import numpy as np

Sample = Literal["spread", "prefix"]
SAMPLES: tuple[str, ...] = get_args(Sample)
SAMPLE_HELP = ("Which windows are scored when fewer tokens are asked for than the split holds: spread (a "
               "seeded uniform sample of windows across the whole split) | prefix (its first windows)")
STREAM = 44
"""Second word of the sample's seed sequence, so the draw is not the batch order's (seeded [seed, epoch])."""


def pick(n_windows: int, k: int, sample: str, seed: int = 0) -> np.ndarray:
    """Indices (ascending) of the k of n_windows grid windows that are scored."""
    if sample not in SAMPLES:
        raise ValueError(f"sample must be one of {SAMPLES}, got {sample!r}")
    k = min(k, n_windows)
    if sample == "prefix" or k == n_windows:
        return np.arange(k)
    rng = np.random.default_rng([seed, STREAM])
    return np.sort(rng.choice(n_windows, size=k, replace=False))


def documents_covered(ids, spans: list[tuple[int, int]], eos_id: int | None) -> tuple[int, int] | None:
    """(documents the scored positions touch, documents in the split); spans are [first, last] positions
    of the scored targets, inclusive. A document is the ids up to and including an end-of-text id (a tail
    without one is a document too). None without an end-of-text id."""
    if eos_id is None or len(ids) == 0:
        return None
    is_end = np.asarray(ids[:]) == eos_id
    before = np.concatenate([[0], np.cumsum(is_end)])  # before[p]: documents ended before position p
    total = int(before[-1]) + (0 if is_end[-1] else 1)
    covered, last = 0, -1
    for first, end in sorted(spans):
        lo, hi = int(before[first]), int(before[end])  # the documents of positions first and end
        lo = max(lo, last + 1)
        if hi >= lo:
            covered += hi - lo + 1
            last = hi
    return covered, total


def ratio_stderr(nll: np.ndarray, count: np.ndarray, n_windows: int) -> float | None:
    """Standard error of sum(nll)/sum(count) over k sampled windows of n_windows (linearised ratio
    estimator, finite-population corrected: 0 when every window is scored). None for fewer than 2."""
    k = len(nll)
    if k < 2:
        return None
    nll, count = np.asarray(nll, dtype=np.float64), np.asarray(count, dtype=np.float64)
    ratio = nll.sum() / count.sum()
    resid = nll - ratio * count
    var = (1.0 - k / n_windows) * resid.var(ddof=1) / (k * count.mean() ** 2)
    return math.sqrt(max(var, 0.0))
