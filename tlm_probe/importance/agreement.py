"""Proxy agreement: Spearman rho across layers between each cheap proxy and the ablation effect.

Rows go into the agreement table (agreement.csv, results.AGREEMENT_COLUMNS: one per model and proxy, not
a layer's), statistic `spearman_<proxy>`; ci_low/ci_high are a Fisher-z 95% interval with the Bonett &
Wright (2000) variance (1 + rho^2 / 2) / (n - 3), NaN where no interval means anything: over fewer than
MIN_CI_LAYERS layers, and at rho = ±1 (z is infinite; the interval printed before was [+1, +1], over 3 or
4 layers); n_tokens here holds the number of layers compared (n_layers in the table).
The target is `ablation_dnll_mlp_zero` for causal LMs and `ablation_shift_mlp_zero` for encoders.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import spearmanr

from tlm_probe.importance.streaming import Z95
from tlm_probe.statistic_names import PROXIES

MIN_CI_LAYERS = 5
"""The fewest layers a Spearman interval is given over: over n layers even a perfect ranking (rho = ±1) has
two-sided p = 2/n! under independence, 0.083 at n = 4 (not significant at 5%), 0.017 at n = 5."""


def spearman_ci(rho: float, n: int) -> tuple[float, float]:
    """The 95% interval of rho over n layers, (nan, nan) where none means anything (see MIN_CI_LAYERS)."""
    if n < MIN_CI_LAYERS or not np.isfinite(rho) or abs(rho) >= 1:
        return math.nan, math.nan
    z, se = math.atanh(rho), math.sqrt((1 + rho**2 / 2) / (n - 3))
    return math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)


def spearman_rows(per_layer: dict[str, np.ndarray], target: str) -> list[dict]:
    """per_layer: statistic -> values by layer. One row per proxy present (and not constant)."""
    y = np.asarray(per_layer[target], dtype=float)
    rows = []
    for proxy in PROXIES:
        if proxy not in per_layer:
            continue
        x = np.asarray(per_layer[proxy], dtype=float)
        ok = np.isfinite(x) & np.isfinite(y)
        n = int(ok.sum())
        constant = n < 2 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0
        rho = math.nan if constant else float(spearmanr(x[ok], y[ok]).statistic)
        lo, hi = spearman_ci(rho, n)
        rows.append(dict(statistic=f"spearman_{proxy}", value=rho, ci_low=lo, ci_high=hi, n_tokens=n))
    return rows
