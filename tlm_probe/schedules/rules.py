"""A schedule derived from a per-layer statistic (`tlm schedule --from-probe`): pure arithmetic, no I/O.

    weights w_l = max(0, f(x_l))^power          f from TRANSFORMS (x, 1-x, |x|, -x, ...)
    optional monotone projection of w           least-squares isotonic fit (pool adjacent violators)
    ratios r_l = clip(c·w_l, min_ratio, max_ratio), c chosen by bisection so that mean(r) = 1
    widths = largest-remainder rounding of r·d_ff to multiples (schedules.allocate): sum = L·d_ff exactly

Clipping after scaling keeps the widths proportional to the weights wherever no bound binds, and keeps a
monotone weight sequence monotone. The bounds hold before rounding; a rounded width may sit one multiple
outside them. All weights 0 (or equal) gives uniform. min_ratio = 0 allows blocks with no MLP (d_l = 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, get_args

from tlm_probe.registry import Registry
from tlm_probe.schedules.widths import ScheduleError, allocate

TRANSFORMS: Registry[Callable[[float], float]] = Registry("rule transform", {
    "x": lambda x: x,
    "1-x": lambda x: 1.0 - x,
    "abs": abs,
    "-x": lambda x: -x,
    "1+x": lambda x: 1.0 + x,
}, error=ScheduleError)
"""f(x): the declared function of the statistic (weights are clipped at 0 after it)."""
Monotone = Literal["none", "decreasing", "increasing"]
MONOTONE: tuple[str, ...] = get_args(Monotone)


@dataclass(frozen=True)
class Rule:
    """How a per-layer statistic becomes widths."""

    transform: str = "x"
    """f in w = max(0, f(x))^power: x | 1-x | abs | -x | 1+x."""
    power: float = 1.0
    """Exponent on the weights (0 < power; 1 = proportional)."""
    min_ratio: float = 0.25
    """Smallest d_l/d_ff (0 allows blocks with no MLP)."""
    max_ratio: float = 2.0
    """Largest d_l/d_ff."""
    monotone: str = "none"
    """none | decreasing | increasing: project the weights onto monotone sequences first."""

    def to_dict(self) -> dict:
        return asdict(self)


def check_rule(rule: Rule, n_layers: int) -> None:
    TRANSFORMS.check(rule.transform)
    if rule.monotone not in MONOTONE:
        raise ScheduleError(f"monotone must be one of {', '.join(MONOTONE)}, got {rule.monotone!r}")
    if not (math.isfinite(rule.power) and rule.power > 0):
        raise ScheduleError(f"power must be a finite positive number, got {rule.power!r}")
    if not (0 <= rule.min_ratio <= 1 <= rule.max_ratio < math.inf):
        raise ScheduleError(f"need 0 <= min_ratio <= 1 <= max_ratio (finite), got {rule.min_ratio!r} and "
                            f"{rule.max_ratio!r}")
    if n_layers < 1:
        raise ScheduleError(f"the statistic covers no layer (n_layers={n_layers})")


def isotonic(values: Sequence[float], increasing: bool) -> list[float]:
    """Least-squares monotone fit (pool adjacent violators, equal weights)."""
    xs = list(values) if increasing else [-v for v in values]
    blocks: list[list[float]] = []  # [sum, count]
    for x in xs:
        blocks.append([x, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out = [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]
    return out if increasing else [-v for v in out]


def weights(values: Sequence[float], rule: Rule) -> list[float]:
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise ScheduleError(f"the statistic is missing or not finite at layer(s) {', '.join(map(str, bad))}")
    fn = TRANSFORMS[rule.transform]
    w = [max(0.0, fn(float(v))) ** rule.power for v in values]
    if rule.monotone != "none":
        w = [max(0.0, x) for x in isotonic(w, increasing=rule.monotone == "increasing")]
    return w


def bounded_ratios(w: Sequence[float], lo: float, hi: float) -> list[float]:
    """r_l = clip(c·w_l, lo, hi) with mean(r) = 1; c by bisection (the mean is non-decreasing in c)."""
    n = len(w)
    if max(w) == 0 or max(w) == min(w):
        return [1.0] * n

    def total(c: float) -> float:
        return sum(min(hi, max(lo, c * x)) for x in w)

    # at c = b the smallest positive weight reaches hi: total(b) = hi·(positive) + lo·(zero), the most any c
    # gives; total(0) = n·lo <= n
    a, b = 0.0, hi / min(x for x in w if x > 0)
    if total(b) < n:  # too few positive weights to hold the budget under max_ratio
        raise ScheduleError(f"max_ratio={hi:g} cannot hold the budget: only {sum(x > 0 for x in w)} of {n} "
                            "layers have a positive weight; raise max_ratio or min_ratio")
    for _ in range(200):  # to float resolution
        m = (a + b) / 2
        a, b = (m, b) if total(m) < n else (a, m)
    return [min(hi, max(lo, b * x)) for x in w]


def widths_from_statistic(
    values: Sequence[float], d_ff: int, multiple_of: int, rule: Rule
) -> tuple[list[int], list[float]]:
    """(integer widths with sum = L·d_ff, the real ratios before rounding)."""
    check_rule(rule, len(values))
    if d_ff < 1 or multiple_of < 1 or d_ff % multiple_of:
        raise ScheduleError(f"d_ff={d_ff} must be a positive multiple of multiple_of={multiple_of}")
    ratios = bounded_ratios(weights(values, rule), rule.min_ratio, rule.max_ratio)
    # largest remainder breaks ties toward the earlier layer, which keeps a non-increasing sequence so;
    # a non-decreasing one is allocated back to front for the same reason
    back = rule.monotone == "increasing"
    order = ratios[::-1] if back else ratios
    widths = allocate(order, d_ff, multiple_of, allow_zero=rule.min_ratio == 0)
    return (widths[::-1] if back else widths), ratios
