"""One entry point for every figure kind: a request + input paths -> a Figure (used by `tlm plot`,
`tlm report` and analyses/make_figures.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.arms import arm_colours
from tlm_probe.plotting.curves import plot_curves
from tlm_probe.plotting.depth import plot_depth
from tlm_probe.plotting.heatmaps import plot_heatmaps
from tlm_probe.plotting.importance import default_proxies, plot_importance
from tlm_probe.plotting.inputs import (
    advantage_curves,
    input_kind,
    lacking_notes,
    load_comparison,
    load_probe,
    load_run,
    merge_probes,
    schedule_table,
    split_note,
)
from tlm_probe.plotting.schedules import plot_schedules
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE
from tlm_probe.plotting.sweep import plot_sweep
from tlm_probe.plotting.trajectory import plot_trajectory
from tlm_probe.stats.sweep import sweep_table

DEFAULT_SCHEDULES = ("uniform", "linear:1.5:0.5", "cosine:1.5:0.5", "sigmoid:1.5:0.5", "wider-early")


@dataclass
class FigureRequest:
    kind: str = "depth"
    """depth | heatmap | importance | curves | schedules | sweep | trajectory | advantage"""
    statistics: Sequence[str] = ()
    """Statistic(s) to draw; empty = the kind's default."""
    x: str = "depth"
    """x axis of a depth figure: depth | layer"""
    size: tuple[int, int] = DEFAULT_SIZE
    dpi: int = DEFAULT_DPI
    title: str | None = None
    layers: int = 24
    """Schedules figure: number of layers."""
    d_ff: int = 2816
    """Schedules figure: uniform width (the budget is layers·d_ff)."""
    schedules: Sequence[str] = field(default_factory=lambda: list(DEFAULT_SCHEDULES))
    multiple_of: int = 64
    notes: list[str] = field(default_factory=list)
    """Filled while drawing: what the figure left out and why (the CLI prints these)."""


def _probe_tables(paths: Sequence[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    if not paths:
        raise UserError("give at least one probe result folder (written by `tlm probe --out DIR`)")
    for p in paths:
        if input_kind(p) != "probe":
            raise UserError(f"{p} is a {input_kind(p)} folder, but this figure needs probe results")
    probes = [load_probe(p) for p in paths]
    results, matrices = merge_probes(probes)
    tokens = results.groupby("model")["n_tokens"].max().to_dict()
    return results, matrices, tokens


def _one(stats: Sequence[str], default: str, kind: str) -> str:
    if len(stats) > 1:
        raise UserError(f"a {kind} figure draws one statistic; got {len(stats)}: {', '.join(stats)}")
    return stats[0] if stats else default


def _depth(paths, req: FigureRequest) -> Figure:
    results, _, _ = _probe_tables(paths)
    stat = _one(req.statistics, "align_mlp_mid", "depth")
    req.notes += lacking_notes(results, results["model"], stat)
    req.notes += split_note(results)
    return plot_depth(results, stat, x=req.x, size=req.size, dpi=req.dpi, title=req.title)


def _heatmap(paths, req: FigureRequest) -> Figure:
    _, matrices, tokens = _probe_tables(paths)
    if matrices is None:
        raise UserError("these probe results have no layer×layer matrices (matrices.csv); "
                        "probe with matrix statistics (angular distance, CKA) first")
    stat = _one(req.statistics, str(matrices["statistic"].iloc[0]), "heatmap")
    req.notes += lacking_notes(matrices, tokens, stat, "matrices")
    return plot_heatmaps(matrices, stat, size=req.size, dpi=req.dpi, title=req.title, tokens=tokens)


def _importance(paths, req: FigureRequest) -> Figure:
    results, _, _ = _probe_tables(paths)
    stats = list(req.statistics) or default_proxies(results)
    if not stats:
        raise UserError("no importance proxies in these results; name them with --statistic")
    for stat in stats:
        req.notes += lacking_notes(results, results["model"], stat)
    req.notes += split_note(results)
    return plot_importance(results, stats, size=req.size, dpi=req.dpi, title=req.title)


def _curves(paths, req: FigureRequest) -> Figure:
    loaders = {"compare": load_comparison, "run": load_run}
    frames = []
    for p in paths:
        kind = input_kind(p)
        if kind not in loaders:
            raise UserError(f"{p} is a {kind} result; training curves need a comparison or run folder")
        frames.append(loaders[kind](p).curves)
    if not frames:
        raise UserError("give at least one comparison folder (tlm compare --out DIR) or run folder")
    metrics = list(req.statistics) or ["train_loss", "val_loss"]
    return plot_curves(pd.concat(frames, ignore_index=True), metrics=metrics, size=req.size, dpi=req.dpi,
                       title=req.title)


def _schedules(paths, req: FigureRequest) -> Figure:
    if paths:
        raise UserError("the schedules figure takes no inputs; use --layers, --d-ff and --schedule")
    table = schedule_table(req.schedules or DEFAULT_SCHEDULES, req.layers, req.d_ff, req.multiple_of)
    return plot_schedules(table, req.d_ff, size=req.size, dpi=req.dpi, title=req.title)


def _sweep(paths, req: FigureRequest) -> Figure:
    if len(paths) != 1 or input_kind(paths[0]) != "compare":
        raise UserError("the sweep figure takes one comparison folder (tlm sweep/compare --out DIR)")
    paired = load_comparison(paths[0]).tables.get("paired")
    if paired is None or paired.empty:
        raise UserError(f"{paths[0]} has no paired table yet (it needs uniform and one other arm, each "
                        "with a finished seed)")
    metric = _one(req.statistics, "val_loss", "sweep")
    if f"{metric}_diff_mean" not in paired:
        raise UserError(f"no paired differences of {metric!r} in {paths[0]}/paired.csv")
    return plot_sweep(sweep_table(paired, metric), metric, size=req.size, dpi=req.dpi, title=req.title)


def _trajectory(paths, req: FigureRequest) -> Figure:
    results, _, _ = _probe_tables(paths)
    if "step" not in results:
        raise UserError("these results have no step column: probe a run's checkpoints with "
                        "`tlm probe RUN --checkpoints all --out DIR` first")
    stat = _one(req.statistics, "align_mlp_mid", "trajectory")
    return plot_trajectory(results, stat, x=req.x, size=req.size, dpi=req.dpi, title=req.title)


def _advantage(paths, req: FigureRequest) -> Figure:
    if len(paths) != 1 or input_kind(paths[0]) != "compare":
        raise UserError("the advantage figure takes one comparison folder (tlm compare --out DIR)")
    metric = _one(req.statistics, "val_loss", "advantage")
    curves = advantage_curves(paths[0], metric)
    if curves.empty:
        raise UserError(f"{paths[0]} has no arm with {metric} logged at the baseline's steps yet")
    title = req.title or f"each arm's {metric} minus the baseline's over training (below 0: ahead)"
    # colours from every arm, baseline included, so an arm keeps the colour it has in the loss curves
    arms = load_comparison(paths[0]).curves["arm"].astype(str)
    return plot_curves(curves, metrics=list(dict.fromkeys(curves["metric"])), size=req.size, dpi=req.dpi,
                       title=title, colours=arm_colours(arms))


BUILDERS: dict[str, Callable[[Sequence[str | Path], FigureRequest], Figure]] = {
    "depth": _depth,
    "heatmap": _heatmap,
    "importance": _importance,
    "curves": _curves,
    "schedules": _schedules,
    "sweep": _sweep,
    "trajectory": _trajectory,
    "advantage": _advantage,
}


def build_figure(paths: Sequence[str | Path], req: FigureRequest) -> Figure:
    if req.kind not in BUILDERS:
        raise UserError(f"unknown figure kind {req.kind!r}; choose one of: {', '.join(BUILDERS)}")
    return BUILDERS[req.kind](list(paths), req)
