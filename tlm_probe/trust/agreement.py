"""Agreement of per-layer rankings (pure, no model): Kendall's W of several rankings of the same layers,
Spearman's rho between two, and the flags `tlm trust` raises."""

from __future__ import annotations

import numpy as np
from scipy import stats


def kendall_w(values: np.ndarray) -> float:
    """Kendall's coefficient of concordance of m rankings (rows) of n items (columns), ties by average rank
    (no tie correction): 1 when every row ranks the items alike, near 0 when they are unrelated."""
    values = values[:, np.isfinite(values).all(0)]  # a layer some corpus has no value at (an absent MLP)
    m, n = values.shape
    if m < 2 or n < 2:
        return float("nan")
    ranks = np.vstack([stats.rankdata(row) for row in values])
    totals = ranks.sum(0)
    s = ((totals - totals.mean()) ** 2).sum()
    return float(12 * s / (m**2 * (n**3 - n)))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    both = np.isfinite(a) & np.isfinite(b)  # layers where both have a value
    a, b = np.asarray(a)[both], np.asarray(b)[both]
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")  # a constant ranking says nothing
    return float(stats.spearmanr(a, b).statistic)


def _median_with(values: np.ndarray, other) -> float | None:
    """Median over corpora of the Spearman of each corpus's row with `other` (a row per corpus, or one row
    for all); None when there is nothing to compare with."""
    if other is None:
        return None
    rhos = [spearman(values[c], other[c] if np.ndim(other) == 2 else other) for c in range(values.shape[0])]
    return float(np.nanmedian(rhos)) if np.isfinite(rhos).any() else None


def judge(table: dict[str, np.ndarray], target: str, min_w: float, min_spearman: float,
          task: tuple[str, np.ndarray] | None = None) -> list[dict]:
    """table[statistic]: (corpora, layers) values; task: (name, (layers,) accuracy drop), the task target.
    One row per statistic: W, the lowest pairwise Spearman between corpora, the median Spearman with the
    target and with the task target, and the flags."""
    rows = []
    for name, values in table.items():
        m = values.shape[0]
        pairs = [spearman(values[i], values[j]) for i in range(m) for j in range(i + 1, m)]
        w = kendall_w(values)
        low = float(np.nanmin(pairs)) if np.isfinite(pairs).any() else float("nan")
        agree = _median_with(values, table[target] if name != target else None)
        with_task = _median_with(values, task[1] if task else None)
        flags = []
        if not w >= min_w or not low >= min_spearman:
            flags.append("ranking changes with the corpus")
        if agree is not None and not agree >= min_spearman:
            flags.append(f"disagrees with {target}")
        if with_task is not None and not with_task >= min_spearman:
            flags.append(f"disagrees with {task[0]}")
        rows.append({"statistic": name, "kendall_w": w, "min_pairwise_spearman": low,
                     "spearman_with_target": agree, "spearman_with_task": with_task,
                     "flags": "; ".join(flags) or "ok"})
    return rows
