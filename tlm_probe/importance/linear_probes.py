"""Linear probes by depth: from a bounded, seeded sample of each layer's residual stream, predict a label
per token with a standardised ridge classifier (one-vs-rest least squares, closed form); report held-out
accuracy. Why not logistic regression: fitted by L-BFGS it took about 80% of a whole `--stats all` run.

Default label: the next token, restricted to the k most frequent next tokens of the data (other tokens are
dropped from the sample), so chance level is about 1/k or the majority share, whichever is larger.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from tlm_probe.importance.streaming import Z95, clustered_ci

PROBE_ALPHA = 1.0  # ridge penalty on standardised features
PROBE_MODEL = f"StandardScaler + RidgeClassifier(alpha={PROBE_ALPHA}), 25% held out"


def next_token_labels(input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T) label = the next token id, -1 where there is no valid next token."""
    labels = torch.full_like(input_ids, -1)
    valid = mask[:, :-1].bool() & mask[:, 1:].bool()
    labels[:, :-1] = torch.where(valid, input_ids[:, 1:], torch.full_like(input_ids[:, 1:], -1))
    return labels


def top_k_filter(labels: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """Keep labels among the k most frequent (by `counts`, a bincount over the whole data); others -> -1."""
    top = np.argsort(-counts, kind="stable")[:k]
    keep = np.isin(labels, top) & (labels >= 0)
    return np.where(keep, labels, -1)


def probe_accuracy(
    x: np.ndarray, y: np.ndarray, seed: int = 0, test_frac: float = 0.25, groups: np.ndarray | None = None
) -> dict:
    """Held-out accuracy of a linear (ridge) probe; returns value, 95% CI and test size. With `groups` (the
    sequence of each token) the CI is clustered by sequence like every token mean; without, binomial."""
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2 or len(y) < 8:
        nan = math.nan
        return dict(value=nan, ci_low=nan, ci_high=nan, std=nan, n_tokens=int(len(y)))
    strat = y if counts.min() >= 2 else None
    g = np.arange(len(y)) if groups is None else groups
    xtr, xte, ytr, yte, _, gte = train_test_split(
        x, y, g, test_size=test_frac, random_state=seed, stratify=strat
    )  # the same split as without groups: one shuffle of the indices serves every array
    clf = make_pipeline(StandardScaler(), RidgeClassifier(alpha=PROBE_ALPHA))
    clf.fit(xtr, ytr)
    correct = (clf.predict(xte) == yte).astype(float)
    acc = float(correct.mean())
    if groups is not None:
        lo, hi = clustered_ci(correct, gte)
    else:
        half = Z95 * math.sqrt(acc * (1 - acc) / len(yte))
        lo, hi = acc - half, acc + half
    return dict(
        value=acc,
        ci_low=max(0.0, lo),
        ci_high=min(1.0, hi),
        std=math.sqrt(acc * (1 - acc)),
        n_tokens=int(len(yte)),
    )


def majority_baseline(y: np.ndarray) -> float:
    _, counts = np.unique(y, return_counts=True)
    return float(counts.max() / counts.sum()) if len(counts) else math.nan
