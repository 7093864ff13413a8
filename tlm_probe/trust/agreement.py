"""Agreement of per-layer rankings (pure, no model): Kendall's W of several rankings of the same layers,
Spearman's rho between two, and the flags `tlm trust` raises."""

from __future__ import annotations

import numpy as np
from scipy import stats


def kendall_w(values: np.ndarray) -> float:
    """Kendall's coefficient of concordance of m rankings (rows) of n items (columns), ties by average rank
    (no tie correction): 1 when every row ranks the items alike, near 0 when they are unrelated."""
    m, n = values.shape
    if m < 2 or n < 2:
        return float("nan")
    ranks = np.vstack([stats.rankdata(row) for row in values])
    totals = ranks.sum(0)
    s = ((totals - totals.mean()) ** 2).sum()
    return float(12 * s / (m**2 * (n**3 - n)))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")  # a constant ranking says nothing
    return float(stats.spearmanr(a, b).statistic)


def judge(table: dict[str, np.ndarray], target: str, min_w: float, min_spearman: float) -> list[dict]:
    """table[statistic]: (corpora, layers) values. One row per statistic: W, the lowest pairwise Spearman
    between corpora, the median Spearman with the target, and the flags."""
    rows = []
    for name, values in table.items():
        m = values.shape[0]
        pairs = [spearman(values[i], values[j]) for i in range(m) for j in range(i + 1, m)]
        with_target = [spearman(values[c], table[target][c]) for c in range(m)] if name != target else []
        w = kendall_w(values)
        low = float(np.nanmin(pairs)) if np.isfinite(pairs).any() else float("nan")
        agree = float(np.nanmedian(with_target)) if with_target and np.isfinite(with_target).any() else None
        flags = []
        if not w >= min_w or not low >= min_spearman:
            flags.append("ranking changes with the corpus")
        if agree is not None and not agree >= min_spearman:
            flags.append(f"disagrees with {target}")
        rows.append({"statistic": name, "kendall_w": w, "min_pairwise_spearman": low,
                     "spearman_with_target": agree, "flags": "; ".join(flags) or "ok"})
    return rows
