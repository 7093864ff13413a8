"""`tlm report`: one self-contained HTML page (and Markdown) from probe results, comparisons and runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.errors import UserError
from tlm_probe.report.options import ReportOptions


@dataclass(frozen=True, kw_only=True)
class ReportRun(JsonOut):
    """`tlm report`'s settings beside ReportOptions: where the page goes."""

    out: Path
    """Report folder: report.html, report.md, figures/*.png, report.json (an earlier report is replaced)."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("report")})
    """See commands/overwrite.py."""


def register(app: typer.Typer) -> None:
    @command(app, "report", "tlm report out/probe-minilm runs/compare-demo --out out/report")
    @with_options(options=ReportOptions, run=ReportRun)
    def report(
        inputs: list[Path] = typer.Argument(..., help="Probe result folders/files, `tlm compare` folders "
                                            "and `tlm train` run folders, in any mix."),
        *,
        options: ReportOptions,
        run: ReportRun,
    ):
        """Write a report page that opens offline: figures embedded as PNG, tables, provenance."""
        # matplotlib/seaborn are imported when the command runs, not when `tlm` starts
        from tlm_probe.files.out_folder import check_apart
        from tlm_probe.plotting.inputs import check_input_folders

        out = run.out
        if not inputs:
            raise UserError("give at least one input folder")
        check_apart(out, inputs)
        check_input_folders(inputs)  # each input's files, before matplotlib and seaborn load
        from tlm_probe.files.folder_lock import folder_lock
        from tlm_probe.report.html import check_report_out, render_figures, write_report
        from tlm_probe.report.sections import build_document

        check_report_out(out, run.overwrite)
        with folder_lock(out):  # from reading the inputs to the last file: a second report waits its turn
            doc = build_document(inputs, options=options)
            if not doc.figures() and not doc.sections:
                raise UserError("nothing to report: the inputs hold no results")
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
            with Progress(*columns, console=err_console, transient=True) as progress:
                task = progress.add_task("drawing figures", total=len(doc.figures()))
                render_figures(doc, lambda name: progress.advance(task))
            summary = write_report(doc, out, run.overwrite)
        if run.json_out:
            print_json(summary)
        else:
            console.print(f"wrote {summary['html']} and {summary['markdown']} "
                          f"({_figures(len(summary['figures']))})", markup=False, highlight=False)


def _figures(n: int) -> str:
    return f"{n} figure" if n == 1 else f"{n} figures"
