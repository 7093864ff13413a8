"""Interleaved, rotated timing rounds and per-round ratios with their spread.

On a machine shared with other jobs, absolute times drift by 2x within minutes. Every round runs every
arm once, in an order rotated by one each round (no arm always runs first, after the same neighbour),
and a ratio is taken within each round, so that load hits numerator and denominator alike; the report is
the median of the per-round ratios with their min and max.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each arm, one list entry per round."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            t = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t)
    return times


def spread(values: list[float]) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": len(values),
    }


def ratio(times: dict[str, list[float]], num: str, den: str) -> dict:
    """Per-round num/den: median, min, max."""
    return spread([a / b for a, b in zip(times[num], times[den], strict=True)])


def line(name: str, r: dict, unit: str = "x") -> str:
    if "error" in r:
        return f"  {name:58s} n/a ({r['error'][:60]})"
    lo_hi = f"[min {r['min']:.3f}, max {r['max']:.3f}; {r['rounds']} rounds]"
    return f"  {name:58s} {r['median']:8.3f}{unit}  {lo_hi}"
