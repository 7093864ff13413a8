"""A sweep: a grid of arms (schedule shape x start:end ratio, beside uniform and any extra arms) trained by
compare_arms() at one budget on identical batches.

The grid is expanded into ordinary schedule specs ("cosine:1.5:0.5"), so a sweep folder *is* a comparison
folder: `tlm compare` with the same arms continues it, and every table compare writes is there
(stats/sweep.py turns its paired table into the heatmap's table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tlm_probe.errors import UserError
from tlm_probe.schedules.widths import SCHEDULES, check_params, parse_schedule
from tlm_probe.stats.sweep import GRID_SHAPES


def parse_ratios(text: str) -> list[tuple[float, float]]:
    """'1.25:0.75,1.5:0.5' -> [(1.25, 0.75), (1.5, 0.5)]; a UserError names a malformed item."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        parts = item.split(":")
        try:
            start, end = (float(x) for x in parts) if len(parts) == 2 else (math.nan, math.nan)
        except ValueError:
            start = end = math.nan
        if not (math.isfinite(start) and math.isfinite(end) and start > 0 and end > 0):
            raise UserError(f"--ratios item {item!r} is not START:END with two positive numbers (1.5:0.5)")
        out.append((start, end))
    if len(set(out)) != len(out):
        raise UserError(f"--ratios lists a ratio twice: {text}")
    return out


def grid_arms(
    shapes: Sequence[str], ratios: Sequence[tuple[float, float]], extra: Sequence[str] = ()
) -> list[str]:
    """uniform first (the baseline), then each shape in order — a grid shape (cosine, ...) once per ratio,
    a zoo shape (openelm[:S:E], middle[:F], hourglass[:W:D]) once with its own parameters — then the
    extra arms (wider-early, ...)."""
    zoo = SCHEDULES.where(lambda row: row.group == "zoo")
    bad = [s for s in shapes if s not in GRID_SHAPES and s.split(":")[0] not in zoo]
    if bad:
        raise UserError(f"unknown sweep shape(s) {', '.join(bad)}; choose from: "
                        f"{', '.join(GRID_SHAPES)} (x --ratios) or {', '.join(zoo)} (with their parameters)")
    grid: list[str] = []
    for s in shapes:
        if s in GRID_SHAPES:
            grid += [f"{s}:{a:g}:{b:g}" for a, b in ratios]
        else:
            check_params(parse_schedule(s))  # a malformed zoo item fails here, before any training
            grid.append(s)
    arms = ["uniform", *grid, *(e for e in extra if e != "uniform")]
    if len(set(arms)) != len(arms):
        raise UserError("the sweep names an arm twice (an extra arm repeats a grid arm)")
    return arms


def check_heatmap(shapes: Sequence[str], ratios: Sequence[tuple[float, float]], n_mixers: int) -> None:
    """Refuse, before training, a sweep whose heatmap would hold one cell: plotting.sweep draws two or more
    shape x ratio cells (over all mixers' panels). Zoo shapes are off the grid and draw none."""
    taper = [f"{s}:{a:g}:{b:g}" for s in shapes if s in GRID_SHAPES for a, b in ratios]
    if len(taper) * n_mixers == 1:
        raise UserError(f"a sweep's heatmap needs two or more shape x ratio cells, and --shapes x --ratios "
                        f"gives one ({taper[0]}); give more, or compare that one arm: "
                        f"tlm compare --schedules uniform,{taper[0]}")
