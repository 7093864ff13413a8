"""Figures from result tables. Drawing modules compute nothing; `inputs` turns folders into tables.

    from tlm_probe.plotting import plot_depth, save_figure
    save_figure(plot_depth(results_df, "align_mlp_mid"), "fig.png")
"""

from tlm_probe.plotting.curves import plot_curves
from tlm_probe.plotting.depth import plot_depth
from tlm_probe.plotting.heatmaps import plot_heatmaps
from tlm_probe.plotting.importance import plot_importance
from tlm_probe.plotting.schedules import plot_schedules
from tlm_probe.plotting.style import FORMATS, figure_style, parse_size, save_figure

__all__ = [
    "FORMATS",
    "figure_style",
    "parse_size",
    "plot_curves",
    "plot_depth",
    "plot_heatmaps",
    "plot_importance",
    "plot_schedules",
    "save_figure",
]
