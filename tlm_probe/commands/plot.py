"""`tlm plot`: one figure (PNG, PDF or SVG) from probe results, comparisons, runs or schedules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import with_options
from tlm_probe.plotting.options import PlotOptions

ONE_AXIS_TITLE = ("depth", "schedules", "trajectory")  # these title their axes; the others the figure


@dataclass(frozen=True, kw_only=True)
class PlotRun(JsonOut):
    """`tlm plot`'s settings beside PlotOptions: where the figure goes."""

    out: Path
    """Figure file: .png, .pdf or .svg."""


def register(app: typer.Typer) -> None:
    @command(app, "plot", "tlm plot out/probe-minilm out/probe-gpt2 --statistic align_mlp_mid --out fig.png")
    @with_options(options=PlotOptions, run=PlotRun)
    def plot(
        inputs: list[Path] = typer.Argument(None, help="Probe result folders/files (depth, heatmap, "
                                            "importance), comparison/run folders (curves) or one "
                                            "comparison folder (sweep)."),
        *,
        options: PlotOptions,
        run: PlotRun,
    ):
        """Draw one figure from result tables and save it (written to a temporary file, then renamed)."""
        from tlm_probe.plotting.inputs import check_input_folders

        check_input_folders(inputs or [])  # each input's files, before matplotlib and seaborn load
        from tlm_probe.plotting.figures import build_figure
        from tlm_probe.plotting.style import figure_format, save_figure

        out, kind, (width, height) = run.out, options.kind, options.pixels
        figure_format(out)  # fail on a bad suffix before any loading
        notes: list[str] = []
        with err_console.status(f"drawing {kind} figure"):
            fig = build_figure(list(inputs or []), options, notes=notes)
            path = save_figure(fig, out)
        result = {"out": str(path), "kind": kind, "format": figure_format(path), "width": width,
                  "height": height, "dpi": options.dpi, "inputs": [str(p) for p in inputs or []],
                  "title": _title(fig, kind),
                  "notes": notes}
        for note in notes:
            err_console.print(f"note: {note}", markup=False, highlight=False)
        if run.json_out:
            print_json(result)
        else:
            console.print(f"wrote {path} ({width}x{height} px)", markup=False, highlight=False)


def _title(fig, kind: str) -> str:
    """The figure's title: the suptitle, or for kinds drawn on one axes its title (a trajectory of
    several runs has one panel each and titles the figure)."""
    if kind in ONE_AXIS_TITLE and not fig.get_suptitle():
        return fig.axes[0].get_title()
    return fig.get_suptitle()
