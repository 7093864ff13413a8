"""Figures from result tables. Drawing modules compute nothing; `inputs` turns folders into tables.

    from tlm_probe.plotting import plot_depth, save_figure
    save_figure(plot_depth(results_df, "align_mlp_mid"), "fig.png")

The names below are imported on first use, not with the package: `tlm_probe.plotting.options` (what the
CLI builds `tlm plot`'s options from at start-up) must not pull in matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the module of this package that defines it
_WHERE = {
    "FORMATS": "style",
    "figure_style": "style",
    "parse_size": "options",
    "plot_curves": "curves",
    "plot_depth": "depth",
    "plot_depth_panels": "depth_panels",
    "plot_heatmaps": "heatmaps",
    "plot_importance": "importance",
    "plot_schedules": "schedules",
    "save_figure": "style",
}

__all__ = sorted(_WHERE)

if TYPE_CHECKING:  # type checkers and editors run no __getattr__: the same names (`X as X`: re-exported)
    from tlm_probe.plotting.curves import plot_curves as plot_curves
    from tlm_probe.plotting.depth import plot_depth as plot_depth
    from tlm_probe.plotting.depth_panels import plot_depth_panels as plot_depth_panels
    from tlm_probe.plotting.heatmaps import plot_heatmaps as plot_heatmaps
    from tlm_probe.plotting.importance import plot_importance as plot_importance
    from tlm_probe.plotting.options import parse_size as parse_size
    from tlm_probe.plotting.schedules import plot_schedules as plot_schedules
    from tlm_probe.plotting.style import FORMATS as FORMATS
    from tlm_probe.plotting.style import figure_style as figure_style
    from tlm_probe.plotting.style import save_figure as save_figure


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
