"""Power of the paired t-test every comparison runs: how large a difference its seeds could have detected.

A comparison that finds no significant difference says little unless its design could have seen one. With
n seed pairs whose differences have standard deviation s, the two-sided paired t-test at level alpha
rejects a true mean difference of d_z * s with probability power(d_z, n) (the noncentral t distribution,
df = n - 1, noncentrality d_z * sqrt(n)). `detectable_difference` inverts it: the smallest |Δ| found with
the given power. It uses the observed s, itself uncertain when pairs are few, so it is a guide to how many
seeds a comparison needs, not a property of the true effect (it is not "observed power")."""

from __future__ import annotations

import math

from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8


def paired_t_power(d_z: float, n: int, alpha: float = ALPHA) -> float:
    """Probability that a two-sided paired t-test at `alpha` on `n` pairs rejects when the true mean
    difference is `d_z` standard deviations of the differences."""
    if n < 2:
        return math.nan
    df, shift = n - 1, d_z * math.sqrt(n)
    critical = stats.t.ppf(1 - alpha / 2, df)
    low = stats.nct.cdf(-critical, df, shift)
    return float(stats.nct.sf(critical, df, shift) + (0.0 if math.isnan(low) else low))


def detectable_dz(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The standardized difference d_z that `n` pairs detect with probability `power`."""
    if n < 2:
        return math.nan
    return float(optimize.brentq(lambda d: paired_t_power(d, n, alpha) - power, 1e-9, 1e4, xtol=1e-10))


def detectable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest |mean difference| that `n` pairs with differences of standard deviation `sd` detect
    with probability `power` (NaN with fewer than two pairs, or no spread to scale by)."""
    if n < 2 or not math.isfinite(sd) or sd <= 0:
        return math.nan
    return detectable_dz(n, alpha, power) * sd



def pairs_needed(difference: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """The fewest seed pairs whose paired t-test detects a true mean difference `difference` with
    probability `power`, when the differences have standard deviation `sd` (from a pilot comparison's
    `_diff_std`). Power grows with n, so: double until enough, then bisect."""
    if not (math.isfinite(difference) and math.isfinite(sd) and difference != 0 and sd > 0):
        raise ValueError(f"need a nonzero difference and a positive sd, got {difference} and {sd}")
    d_z = abs(difference) / sd
    low, high = 2, 2
    while paired_t_power(d_z, high, alpha) < power:
        low, high = high + 1, high * 2
        if high > 10**9:
            raise ValueError(f"more than 10^9 pairs would be needed for d_z {d_z:.3g}")
    while low < high:  # the smallest n in [low, high] with enough power
        mid = (low + high) // 2
        low, high = (low, mid) if paired_t_power(d_z, mid, alpha) >= power else (mid + 1, high)
    return low
