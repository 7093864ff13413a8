"""Figures from result tables. Drawing modules compute nothing; `inputs` turns folders into tables.

    from tlm_probe.plotting import plot_depth, save_figure
    save_figure(plot_depth(results_df, "align_mlp_mid"), "fig.png")

The names below are imported on first use, not with the package: `tlm_probe.plotting.options` (what the
CLI builds `tlm plot`'s options from at start-up) must not pull in matplotlib.
"""

from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
