"""The figures a comparison folder holds beside its tables, drawn from those tables once the runs are in:
`paired.png` (`tlm compare`, `tlm sweep` and `tlm demo`, once an arm has two seed pairs) and `sweep.csv` with
`sweep_heatmap.png` (`tlm sweep`). `tlm plot DIR --kind paired|sweep` redraws them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tlm_probe.files.fileio import atomic_write_text, drop_entry, record
from tlm_probe.files.folder_lock import folder_lock
from tlm_probe.files.tablefile import read_table_file
from tlm_probe.stats.paired import has_interval, paired_by_seed
from tlm_probe.train.compare import PAIRED_FIGURE, SWEEP_FILES

if TYPE_CHECKING:
    import pandas as pd


def _paired_table(out: Path) -> pd.DataFrame | None:
    """The folder's paired.csv, or None where it is missing or blank (bounded: size before reading)."""
    path = out / "paired.csv"
    if not path.is_file() or path.stat().st_size < 2:
        return None
    return read_table_file(path)


def write_paired_figure(out: Path, command: str = "compare",
                        paired: pd.DataFrame | None = None) -> Path | None:
    """paired.png: each arm's validation loss minus its baseline's, a dot per seed, with the paired table's
    mean and interval (as `tlm plot OUT --kind paired` draws it), once an arm has two seed pairs; without,
    the paired.png tlm drew there before (for more seeds) is deleted. `paired`: the folder's paired.csv,
    where the caller has read it."""
    paired = _paired_table(out) if paired is None else paired
    if not has_interval(paired, "val_loss"):  # a figure of an earlier run with more seeds is out of date
        with folder_lock(out):
            drop_entry(out, PAIRED_FIGURE, command)
        return None
    from tlm_probe.plotting.paired import plot_paired  # matplotlib: only when there is a figure to draw
    from tlm_probe.plotting.style import save_figure

    diffs, summary = paired_by_seed(read_table_file(out / "results.csv"), paired, "val_loss")
    with folder_lock(out):
        record(out, [PAIRED_FIGURE], command)
        return save_figure(plot_paired(diffs, summary, "val_loss"), out / PAIRED_FIGURE)


def write_sweep(out: Path, paired: pd.DataFrame | None = None) -> Path | None:
    """sweep.csv (each arm's paired difference to uniform) and sweep_heatmap.png, once there are pairs.
    `paired`: the folder's paired.csv, where the caller has read it."""
    from tlm_probe.plotting.style import save_figure
    from tlm_probe.plotting.sweep import plot_sweep
    from tlm_probe.stats.sweep import sweep_table

    paired = _paired_table(out) if paired is None else paired
    if paired is None:
        return None
    table = sweep_table(paired)
    on_grid = (table["ratio"].astype(str) != "").any()
    with folder_lock(out):
        record(out, list(SWEEP_FILES), "sweep")
        atomic_write_text(out / "sweep.csv", table.to_csv(index=False))
        return save_figure(plot_sweep(table), out / "sweep_heatmap.png") if on_grid else None


def write_figures(out: Path, sweep: bool) -> dict[str, str]:
    """The figures `tlm compare` (and with `sweep`, `tlm sweep`) writes after its runs: {name: path} of
    those drawn (paired_figure, sweep_heatmap), as --json prints them."""
    paired = _paired_table(out)  # read once for both figures
    figures = {"paired_figure": write_paired_figure(out, paired=paired),
               "sweep_heatmap": write_sweep(out, paired) if sweep else None}
    return {k: str(v) for k, v in figures.items() if v}
