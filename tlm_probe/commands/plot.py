"""`tlm plot`: one figure (PNG, PDF or SVG) from probe results, comparisons, runs or schedules."""

from __future__ import annotations

from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, print_json

# names only, so that `tlm` starts without matplotlib; tests check them against plotting.figures
FIGURE_KINDS = ("depth", "heatmap", "importance", "curves", "schedules", "sweep", "trajectory", "advantage")
ONE_AXIS_TITLE = ("depth", "schedules", "trajectory")  # these title their axes; the others the figure
DEFAULT_SCHEDULES = ("uniform", "linear:1.5:0.5", "cosine:1.5:0.5", "sigmoid:1.5:0.5", "wider-early")


def register(app: typer.Typer) -> None:
    @command(app, "plot", "tlm plot out/probe-minilm out/probe-gpt2 --statistic align_mlp_mid --out fig.png")
    def plot(
        inputs: list[Path] = typer.Argument(None, help="Probe result folders/files (depth, heatmap, "
                                            "importance), comparison/run folders (curves) or one "
                                            "comparison folder (sweep)."),
        out: Path = typer.Option(..., "--out", "-o", help="Figure file: .png, .pdf or .svg."),
        kind: str = typer.Option("depth", help=f"Figure kind: {' | '.join(FIGURE_KINDS)}."),
        statistic: list[str] = typer.Option(None, "--statistic", "-s", help="Statistic to draw (repeat "
                                            "for importance panels; curves: train_loss, val_loss)."),
        x: str = typer.Option("depth", help="x axis of a depth figure: depth (l/(L-1), overlays models "
                              "of any depth) | layer."),
        size: str = typer.Option("1200x800", help="Figure size in pixels, WIDTHxHEIGHT."),
        dpi: int = typer.Option(150, help="Dots per inch (sets text size relative to the pixels)."),
        title: str = typer.Option(None, help="Replace the automatic title."),
        layers: int = typer.Option(24, help="Schedules figure: number of layers L."),
        d_ff: int = typer.Option(2816, "--d-ff", help="Schedules figure: uniform MLP width."),
        schedule: list[str] = typer.Option(None, "--schedule", help="Schedules figure: a schedule spec "
                                           "(repeatable).", show_default=", ".join(DEFAULT_SCHEDULES)),
        multiple_of: int = typer.Option(64, help="Schedules figure: width rounding multiple."),
        json_out: bool = typer.Option(False, "--json", help="Print a JSON object describing the figure."),
    ):
        """Draw one figure from result tables and save it (written to a temporary file, then renamed)."""
        from tlm_probe.plotting.figures import FigureRequest, build_figure
        from tlm_probe.plotting.style import figure_format, parse_size, save_figure

        figure_format(out)  # fail on a bad suffix before any loading
        req = FigureRequest(kind=kind, statistics=list(statistic or []), x=x, size=parse_size(size),
                            dpi=dpi, title=title, layers=layers, d_ff=d_ff,
                            schedules=list(schedule or DEFAULT_SCHEDULES), multiple_of=multiple_of)
        with err_console.status(f"drawing {kind} figure"):
            fig = build_figure(list(inputs or []), req)
            path = save_figure(fig, out)
        result = {"out": str(path), "kind": kind, "format": figure_format(path), "width": req.size[0],
                  "height": req.size[1], "dpi": dpi, "inputs": [str(p) for p in inputs or []],
                  "title": _title(fig, kind),
                  "notes": req.notes}
        for note in req.notes:
            err_console.print(f"note: {note}", markup=False, highlight=False)
        if json_out:
            print_json(result)
        else:
            console.print(f"wrote {path} ({req.size[0]}x{req.size[1]} px)", markup=False, highlight=False)


def _title(fig, kind: str) -> str:
    """The figure's title: the suptitle, or for kinds drawn on one axes its title (a trajectory of
    several runs has one panel each and titles the figure)."""
    if kind in ONE_AXIS_TITLE and not fig.get_suptitle():
        return fig.axes[0].get_title()
    return fig.get_suptitle()
