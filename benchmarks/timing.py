"""Interleaved, rotated timing rounds and per-round ratios with their spread, by two clocks.

On a machine shared with other jobs, absolute times drift by 2x within minutes. Every round runs every
arm once, in an order rotated by one each round (no arm always runs first, after the same neighbour),
and a ratio is taken within each round, so that load hits numerator and denominator alike; the report is
the median of the per-round ratios with their min and max, by wall clock and by process CPU clock (the
CPU time of this process, all its threads, and of the child processes it waited for: on a loaded machine
it leaves out the waits for a core that inflate the wall clock). A figure from fewer than MIN_ROUNDS
rounds is printed as a smoke run, not a measurement.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable

MIN_ROUNDS = 7
SMOKE = "smoke run, not a measurement"


def process_cpu() -> float:
    """CPU seconds of this process (every thread: torch's intra-op workers too, which thread_time leaves
    out) plus those of its children that have exited (arms that run a subprocess)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": process_cpu}


class Times(dict):
    """Seconds per call of each arm, one list entry per round, by wall clock (the dict itself); the same by
    process CPU clock in .cpu (empty where an arm's CPU time was not measured)."""

    def __init__(self, wall: dict[str, list[float]], cpu: dict[str, list[float]] | None = None):
        super().__init__(wall)
        self.cpu = cpu or {}


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> Times:
    """Seconds per call of each arm, one list entry per round, by both clocks."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times = Times({n: [] for n in names}, {n: [] for n in names})
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            t, c = time.perf_counter(), process_cpu()
            fns[name]()
            times.cpu[name].append(process_cpu() - c)
            times[name].append(time.perf_counter() - t)
    return times


def rounds_note(rounds: int) -> int | str:
    """The rounds as a JSON report gives them: the count, or the count marked a smoke run."""
    return rounds if rounds >= MIN_ROUNDS else f"{rounds} ({SMOKE})"


def spread(values: list[float]) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": len(values),
    }


def per_round(times: dict[str, list[float]], fn: Callable[[dict[str, float]], float]) -> dict:
    """fn of one round's seconds per arm ({arm: seconds}), each round, by wall clock (the spread) and, where
    times has them (a Times), by CPU clock (its spread under "cpu")."""

    def by(clock: dict[str, list[float]]) -> dict:
        names = list(clock)
        return spread([fn(dict(zip(names, r, strict=True))) for r in zip(*clock.values(), strict=True)])

    out = by(dict(times))
    cpu = getattr(times, "cpu", None)
    if cpu and all(cpu.values()):
        try:
            out["cpu"] = by(cpu)
        except ZeroDivisionError:  # an arm too short for the CPU clock: the wall figure alone
            pass
    return out


def ratio(times: dict[str, list[float]], num: str, den: str) -> dict:
    """Per-round num/den: median, min, max (and the same by CPU clock under "cpu")."""
    return per_round(times, lambda s: s[num] / s[den])


def _figure(r: dict, unit: str) -> str:
    return f"{r['median']:8.3f}{unit} [{r['min']:.3f}, {r['max']:.3f}]"


def line(name: str, r: dict, unit: str = "x") -> str:
    """One figure: median [min, max] (by wall and by CPU clock where both were measured) and the rounds,
    marked a smoke run when fewer than MIN_ROUNDS."""
    if "error" in r:
        return f"  {name:58s} n/a ({r['error'][:60]})"
    clocks = f"wall {_figure(r, unit)}  cpu {_figure(r['cpu'], unit)}" if "cpu" in r else _figure(r, unit)
    smoke = f", {SMOKE}" if r["rounds"] < MIN_ROUNDS else ""
    return f"  {name:58s} {clocks}  ({r['rounds']} rounds{smoke})"
