"""A report document (sections of text, tables and figures) rendered as one self-contained HTML page and
as Markdown, written atomically into a folder.

The HTML embeds every figure as base64 PNG and carries its own CSS: no external file, font, script or
network request, so it opens offline. Reading order: the summary (results first), a contents list, the
sections, then provenance folded in a <details> at the very end; a wide table scrolls inside its own box
so the page itself never runs past the window. Every string that comes from data (model names, paths,
provenance, table cells) goes through `html.escape`; the page contains no <script> at all.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import publish, temp_folder
from tlm_probe.files.folder_lock import folder_lock
from tlm_probe.files.out_folder import claim
from tlm_probe.plotting.style import figure_style


@dataclass
class Text:
    text: str


@dataclass
class Table:
    caption: str
    frame: pd.DataFrame


@dataclass
class FigureBlock:
    name: str
    """File stem of the PNG written next to report.md (letters, digits, '-', '_' only)."""
    caption: str
    make: Callable[[], Figure]
    """Builds the figure when the report is written (so a progress bar can follow the slow part)."""
    png: bytes = b""
    notes: list[str] = field(default_factory=list)
    """What the figure left out and why (the same lines `tlm plot` prints), shown under it."""


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[Section]
    notes: list[str] = field(default_factory=list)
    summary: list = field(default_factory=list)
    """Blocks shown first, before the contents list: the headline results."""
    provenance: list = field(default_factory=list)
    """Blocks shown last, folded: where every input came from."""

    def figures(self) -> list[FigureBlock]:
        blocks = [*self.summary, *(b for s in self.sections for b in s.blocks), *self.provenance]
        return [b for b in blocks if isinstance(b, FigureBlock)]


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def fmt_cell(value) -> str:
    """Numbers to 4 significant digits, integers with thousands separators, NaN as an empty cell."""
    if isinstance(value, bool):
        return str(value)
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return ""  # None, NaN, pd.NA (nullable integer columns such as d_ff of per-model rows)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cells(frame: pd.DataFrame) -> list[list[str]]:
    return [[fmt_cell(v.item() if hasattr(v, "item") else v) for v in row]
            for row in frame.itertuples(index=False)]


def _numeric(frame: pd.DataFrame) -> list[bool]:
    """Which columns hold numbers (right-aligned); text stays left-aligned."""
    return [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
            for c in frame.columns]


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1150px;
color:#1b1b1b;background:#fff;line-height:1.45;padding:0 1rem}
h1{border-bottom:3px solid #0173b2;padding-bottom:.3rem}h2{margin-top:2.2rem;color:#0173b2}
p,li,figcaption,summary{overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%;margin:.6rem 0 1.4rem}
table{border-collapse:collapse;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}th{background:#eef4fa}
td.n{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.3rem 0}
figure{margin:1rem 0}figure img{display:block;max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:.85rem;color:#444}.note{font-size:.85rem;color:#555}
.fignote{font-size:.85rem;color:#8a4b00;margin:.2rem 0}
nav ol{columns:2;font-size:.9rem}
details.provenance td{overflow-wrap:anywhere;max-width:60rem}
details.provenance>summary{cursor:pointer;font-weight:600;color:#0173b2;font-size:1.2rem}
"""


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in t.frame.columns)
    align = ['<td class="n">' if num else "<td>" for num in _numeric(t.frame)]
    body = "".join("<tr>" + "".join(f"{a}{esc(c)}</td>" for a, c in zip(align, row, strict=True)) + "</tr>"
                   for row in _cells(t.frame))
    # the box scrolls, not the page: a table wider than the window keeps its last columns reachable
    return (f'<div class="scroll"><table><caption>{esc(t.caption)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _html_figure(f: FigureBlock) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    notes = "".join(f'<p class="fignote">{esc(n)}</p>' for n in f.notes)
    return (f'<figure><img alt="{esc(f.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(f.caption)}</figcaption>{notes}</figure>")


HTML_BLOCKS: dict[type, Callable] = {
    Text: lambda b: f"<p>{esc(b.text)}</p>",
    Table: _html_table,
    FigureBlock: _html_figure,
}


def _html_blocks(blocks) -> list[str]:
    return [HTML_BLOCKS[type(b)](b) for b in blocks]


def _contents(doc: Document) -> str:
    items = [f'<li><a href="#s{k}">{esc(s.title)}</a></li>' for k, s in enumerate(doc.sections, start=1)]
    if doc.provenance:
        items.append('<li><a href="#provenance">Provenance</a></li>')
    return f'<nav><h2>Contents</h2><ol>{"".join(items)}</ol></nav>' if items else ""


def render_html(doc: Document) -> str:
    parts = [f"<h1>{esc(doc.title)}</h1>"]
    parts += [f'<p class="note">{esc(n)}</p>' for n in doc.notes]
    if doc.summary:
        parts += ['<section id="summary"><h2>Summary</h2>', *_html_blocks(doc.summary), "</section>"]
    parts.append(_contents(doc))
    for k, s in enumerate(doc.sections, start=1):
        parts += [f'<section id="s{k}"><h2>{esc(s.title)}</h2>', *_html_blocks(s.blocks), "</section>"]
    if doc.provenance:  # last and folded: needed to reproduce a result, not to read it
        parts += ['<details class="provenance" id="provenance"><summary>Provenance</summary>',
                  *_html_blocks(doc.provenance), "</details>"]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(doc.title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


MD_SPECIAL = str.maketrans({c: f"\\{c}" for c in "\\`*_[]|#"})


def md_esc(value) -> str:
    """Markdown renders raw HTML, so data is HTML-escaped first, then Markdown's own markup is escaped."""
    return html.escape(str(value), quote=False).translate(MD_SPECIAL).replace("\n", " ")


def _md_table(t: Table) -> str:
    head = "| " + " | ".join(md_esc(c) for c in t.frame.columns) + " |"
    rule = "|" + "---|" * len(t.frame.columns)
    rows = ["| " + " | ".join(md_esc(c) for c in row) + " |" for row in _cells(t.frame)]
    return "\n".join([f"**{md_esc(t.caption)}**", "", head, rule, *rows])


def _md_figure(b: FigureBlock) -> str:
    notes = "".join(f"\n\n> {md_esc(n)}" for n in b.notes)
    return f"![{md_esc(b.caption)}](figures/{b.name}.png)\n\n*{md_esc(b.caption)}*{notes}"


MD_BLOCKS: dict[type, Callable] = {
    Text: lambda b: md_esc(b.text),
    Table: _md_table,
    FigureBlock: _md_figure,
}


def render_markdown(doc: Document) -> str:
    parts = [f"# {md_esc(doc.title)}", *[f"_{md_esc(n)}_" for n in doc.notes]]
    titled = [("Summary", doc.summary)] if doc.summary else []
    titled += [(s.title, s.blocks) for s in doc.sections]
    titled += [("Provenance", doc.provenance)] if doc.provenance else []
    for title, blocks in titled:
        parts.append(f"## {md_esc(title)}")
        parts += [MD_BLOCKS[type(b)](b) for b in blocks]
    return "\n\n".join(parts) + "\n"


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with figure_style():
        fig.savefig(buf, format="png", dpi=fig.dpi, metadata={"Software": "tlm_probe"})
    return buf.getvalue()


def render_figures(doc: Document, advance: Callable[[str], None] = lambda name: None) -> None:
    for f in doc.figures():
        f.png = png_bytes(f.make())
        advance(f.name)


def write_report(doc: Document, out: Path, overwrite: bool = False) -> dict:
    """Write report.html, report.md, figures/*.png and report.json into `out`, all or nothing: the files
    go to a temporary sibling folder and are renamed into place at the end; in a folder holding an
    earlier report only that report's files are replaced (fileio manifest), every other file stays."""
    out = Path(out)
    check_report_out(out, overwrite)
    with folder_lock(out), temp_folder(out) as tmp:
        (tmp / "figures").mkdir()
        for f in doc.figures():
            (tmp / "figures" / f"{f.name}.png").write_bytes(f.png)
        (tmp / "report.html").write_text(render_html(doc), encoding="utf-8")
        (tmp / "report.md").write_text(render_markdown(doc), encoding="utf-8")
        summary = _summary(doc, out)
        (tmp / "report.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        publish(tmp, out, "report")
    return summary


def _summary(doc: Document, out: Path) -> dict:
    return {"html": str(out / "report.html"), "markdown": str(out / "report.md"), "title": doc.title,
            "sections": [s.title for s in doc.sections],
            "figures": [str(out / "figures" / f"{f.name}.png") for f in doc.figures()]}


REPORT_FILES = ("report.html", "report.md", "report.json", "figures")


def check_report_out(out: Path, overwrite: bool = False) -> None:
    """Before any drawing: --out can be written, and holds no files of the user's that it would replace."""
    if not out.parent.is_dir():
        raise UserError(f"parent folder of --out does not exist: {out.parent}")
    claim(out, overwrite=overwrite, writes=REPORT_FILES, own_needs_overwrite=False, kind="report")
