"""One entry point for every figure kind: PlotOptions + input paths -> a Figure (used by `tlm plot`; the
drawing functions it calls are `tlm report`'s and analyses/make_figures.py's too)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.curves import plot_curves
from tlm_probe.plotting.depth import plot_depth
from tlm_probe.plotting.depth_panels import plot_depth_panels
from tlm_probe.plotting.diff import plot_diff
from tlm_probe.plotting.heatmaps import plot_heatmaps
from tlm_probe.plotting.importance import default_proxies, plot_importance
from tlm_probe.plotting.inputs import (
    advantage_curves,
    input_kind,
    lacking_notes,
    load_comparison,
    load_diff,
    load_probe,
    load_run,
    load_trust,
    merge_probes,
    schedule_table,
    split_note,
)
from tlm_probe.plotting.options import DEFAULT_SCHEDULES, FIGURES, PlotOptions
from tlm_probe.plotting.paired import plot_paired
from tlm_probe.plotting.schedules import plot_schedules
from tlm_probe.plotting.sweep import plot_sweep
from tlm_probe.plotting.trajectory import plot_trajectory
from tlm_probe.plotting.trust import plot_trust
from tlm_probe.results import ProbeResult, checked_in_memory
from tlm_probe.stats.paired import paired_by_seed
from tlm_probe.stats.sweep import sweep_table

HEATMAP_STATS = ("alignment", "angular_distance", "cka_linear")  # what the hint asks for: the default set and
# the two matrices that need no second pass
PROBE_IT = {"compare": "tlm probe {p}/runs/NAME --out DIR", "run": "tlm probe {p} --out DIR"}

PlotInput: TypeAlias = str | Path | pd.DataFrame | ProbeResult
"""One input of a figure (tp.plot): a result folder or file, or a probe's table or ProbeResult in memory."""


def _probe_folders(paths: Sequence[str | Path]) -> list[str | Path]:
    """Probe result folders; a comparison stands for the probes inside it (`tlm demo` writes
    OUT/probe/<arm>-s<seed>/), and one without any says how to make them."""
    folders: list[str | Path] = []
    for p in paths:
        kind = input_kind(p)
        inside = load_comparison(p).probes if kind == "compare" else []
        if kind != "probe" and not inside:
            hint = PROBE_IT.get(kind, "tlm probe MODEL --out DIR").format(p=p)
            curves = "; or draw its training curves: --kind curves" if kind in PROBE_IT else ""
            raise UserError(f"{p} is a {kind} folder with no probe results, which this figure needs "
                            f"(probe first: {hint}{curves})")
        folders += inside or [p]
    return folders


def _probe_tables(paths: Sequence) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """The merged tables of probe folders, or of probes held in memory (tp.probe's tables, ProbeResults)."""
    if not paths:
        raise UserError("give at least one probe result folder (written by `tlm probe --out DIR`)")
    probes = []
    for k, p in enumerate(paths):
        if isinstance(p, str | Path):
            probes += [load_probe(folder) for folder in _probe_folders([p])]
        else:
            probes.append(checked_in_memory(p, f"table {k + 1}"))
    results, matrices = merge_probes(probes)
    tokens = results.groupby("model")["n_tokens"].max().to_dict()
    return results, matrices, tokens


def _one(stats: Sequence[str], default: str, kind: str) -> str:
    if len(stats) > 1:
        raise UserError(f"a {kind} figure draws one statistic; got {len(stats)}: {', '.join(stats)}")
    return stats[0] if stats else default


def depth_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    own = len(paths) == 1 and isinstance(paths[0], str | Path) and input_kind(paths[0]) in ("diff", "trust")
    if own:  # `tlm plot DIFF|TRUST`: its own
        return FIGURES.get(input_kind(paths[0]))(paths, opts, notes)
    results, _, _ = _probe_tables(paths)
    stats = list(dict.fromkeys(opts.statistic)) or ["align_mlp_mid"]
    for stat in stats:
        notes += lacking_notes(results, results["model"], stat)
    notes += split_note(results)
    if len(stats) > 1:  # small multiples: one panel per statistic
        return plot_depth_panels(results, stats, x=opts.x, size=opts.pixels, dpi=opts.dpi, title=opts.title)
    return plot_depth(results, stats[0], x=opts.x, size=opts.pixels, dpi=opts.dpi, title=opts.title)


def heatmap_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    _, matrices, tokens = _probe_tables(paths)
    if matrices is None:
        raise UserError("these probe results have no layer×layer matrices (matrices.csv); probe with "
                        f"`tlm probe MODEL --stats {','.join(HEATMAP_STATS)} --out DIR` first")
    stat = _one(opts.statistic, str(matrices["statistic"].iloc[0]), "heatmap")
    notes += lacking_notes(matrices, tokens, stat, "matrices")
    return plot_heatmaps(matrices, stat, size=opts.pixels, dpi=opts.dpi, title=opts.title, tokens=tokens)


def importance_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    results, _, _ = _probe_tables(paths)
    stats = list(opts.statistic) or default_proxies(results)
    if not stats:
        raise UserError("no importance proxies in these results; name them with --statistic")
    for stat in stats:
        notes += lacking_notes(results, results["model"], stat)
    notes += split_note(results)
    return plot_importance(results, stats, size=opts.pixels, dpi=opts.dpi, title=opts.title)


def curves_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    loaders = {"compare": load_comparison, "run": load_run}
    frames = []
    for p in paths:
        kind = input_kind(p)
        if kind not in loaders:
            raise UserError(f"{p} is a {kind} result; training curves need a comparison or run folder")
        frames.append(loaders[kind](p).curves)
    if not frames:
        raise UserError("give at least one comparison folder (tlm compare --out DIR) or run folder")
    metrics = list(opts.statistic) or ["train_loss", "val_loss"]
    return plot_curves(pd.concat(frames, ignore_index=True), metrics=metrics, size=opts.pixels, dpi=opts.dpi,
                       title=opts.title)


def schedules_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    if paths:
        raise UserError("the schedules figure takes no inputs; use --layers, --d-ff and --schedule")
    table = schedule_table(opts.schedule or DEFAULT_SCHEDULES, opts.layers, opts.d_ff, opts.multiple_of)
    return plot_schedules(table, opts.d_ff, size=opts.pixels, dpi=opts.dpi, title=opts.title)


NO_PAIRS = "has no paired table yet (it needs uniform and one other arm, each with a finished seed)"


def _paired_tables(paths, opts: PlotOptions, kind: str, command: str) -> tuple[dict, str]:
    """The tables of the one comparison folder a figure of paired differences draws, and its metric."""
    if len(paths) != 1 or input_kind(paths[0]) != "compare":
        raise UserError(f"the {kind} figure takes one comparison folder ({command} --out DIR)")
    tables = load_comparison(paths[0]).tables
    paired = tables.get("paired")
    if paired is None or paired.empty:
        raise UserError(f"{paths[0]} {NO_PAIRS}")
    metric = _one(opts.statistic, "val_loss", kind)
    if f"{metric}_diff_mean" not in paired:
        raise UserError(f"no paired differences of {metric!r} in {paths[0]}/paired.csv")
    return tables, metric


def sweep_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    tables, metric = _paired_tables(paths, opts, "sweep", "tlm sweep/compare")
    return plot_sweep(sweep_table(tables["paired"], metric), metric, size=opts.pixels, dpi=opts.dpi,
                      title=opts.title)


def paired_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    tables, metric = _paired_tables(paths, opts, "paired", "tlm compare")
    results = tables.get("results")
    if results is None or results.empty:
        raise UserError(f"{paths[0]} {NO_PAIRS}")
    if metric not in results:
        raise UserError(f"no paired differences of {metric!r} in {paths[0]}/paired.csv")
    diffs, summary = paired_by_seed(results, tables["paired"], metric)
    unpaired = sorted(set(summary["arm"]) - set(diffs["arm"]))
    if unpaired:
        raise UserError(f"{paths[0]}: paired.csv pairs {unpaired[0]!r}, but results.csv holds no run of it "
                        "and its baseline with a common seed (not files tlm wrote together)")
    return plot_paired(diffs, summary, metric, size=opts.pixels, dpi=opts.dpi, title=opts.title)


def trajectory_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    results, _, _ = _probe_tables(paths)
    if "step" not in results:
        raise UserError("these results have no step column: probe a run's checkpoints with "
                        "`tlm probe RUN --checkpoints all --out DIR` first")
    stat = _one(opts.statistic, "align_mlp_mid", "trajectory")
    return plot_trajectory(results, stat, x=opts.x, size=opts.pixels, dpi=opts.dpi, title=opts.title)


def advantage_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    if len(paths) != 1 or input_kind(paths[0]) != "compare":
        raise UserError("the advantage figure takes one comparison folder (tlm compare --out DIR)")
    metric = _one(opts.statistic, "val_loss", "advantage")
    curves = advantage_curves(paths[0], metric)
    if curves.empty:
        raise UserError(f"{paths[0]} has no arm with {metric} logged at the baseline's steps yet")
    title = opts.title or f"each arm's {metric} minus the baseline's over training (below 0: ahead)"
    # each arm in its look of every figure (plotting.colours), the one it has in the loss curves
    return plot_curves(curves, metrics=list(dict.fromkeys(curves["metric"])), size=opts.pixels, dpi=opts.dpi,
                       title=title)


def diff_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    if len(paths) != 1 or input_kind(paths[0]) != "diff":
        raise UserError("the diff figure takes one `tlm diff --out DIR` folder")
    s, t = load_diff(paths[0])
    return plot_diff(t["cka.csv"], t["layers.csv"], t["tokens.csv"], names=(s["model_a"], s["model_b"]),
                     pairing=s.get("drift_pairing", "layer"), n_tokens=int(s["n_tokens"]), size=opts.pixels,
                     dpi=opts.dpi, title=opts.title)


def trust_figure(paths, opts: PlotOptions, notes: list[str]) -> Figure:
    if len(paths) != 1 or input_kind(paths[0]) != "trust":
        raise UserError("the trust figure takes one `tlm trust --out DIR` folder")
    s, table = load_trust(paths[0])
    return plot_trust(table, thresholds=s, model=str(s.get("model")), corpora=s["corpora"], size=opts.pixels,
                      dpi=opts.dpi, title=opts.title)




def build_figure(paths: Sequence[PlotInput], options: PlotOptions | None = None, *,
                 notes: list[str] | None = None, **fields) -> Figure:
    """The figure `options` asks for (or PlotOptions(**fields)) from the input folders. What the figure
    leaves out, and why, is appended to `notes` (the CLI prints these)."""
    if options is None:
        options = PlotOptions(**fields)
    elif fields:
        raise TypeError(f"give PlotOptions or its fields, not both: {', '.join(fields)}")
    return FIGURES.get(options.kind)(list(paths), options, [] if notes is None else notes)
