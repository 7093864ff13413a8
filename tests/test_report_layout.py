"""The report's reading order and layout: the summary (paired Δ with CI and p, the alignment figure) comes
first, provenance last and folded; `tlm plot`'s notes stand next to their figure; in headless Chromium at
1280 px the page never scrolls sideways (wide tables scroll in their own box)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from plotting_tables import result_table
from test_report import _chromium, _chromium_or_skip
from typer.testing import CliRunner

from cli import app
from tlm_probe.plotting.figures import build_figure
from tlm_probe.plotting.options import PlotOptions
from tlm_probe.report.html import Document, FigureBlock, fmt_cell, render_html
from tlm_probe.report.sections import probe_sections
from tlm_probe.results import ProbeResult, write_results

runner = CliRunner()
WIDTH = 1280
# runs after layout and image decoding; the copy that gets it is the test's, the report has no script
PROBE_JS = ("<script>window.addEventListener('load',()=>{const d=document.documentElement;"
            "document.body.dataset.scrollWidth=d.scrollWidth;"
            "document.body.dataset.boxes=[...document.querySelectorAll('.scroll')]"
            ".filter(b=>b.scrollWidth>b.clientWidth).length;});</script>")


@pytest.fixture(scope="module")
def demo_report(real_demo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("layout") / "rep"
    r = runner.invoke(app, ["report", str(real_demo_dir), "--out", str(out), "--size", "400x300",
                            "--dpi", "50", "--json"])
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


def _at(page: str, marker: str) -> int:
    assert marker in page, marker
    return page.index(marker)


def test_summary_first_then_contents_then_sections_then_folded_provenance(demo_report, real_demo_dir):
    out, summary = demo_report
    page = (out / "report.html").read_text()
    order = ['<section id="summary">', "<nav><h2>Contents</h2>", '<section id="s1">',
             '<details class="provenance" id="provenance">']
    positions = [_at(page, m) for m in order]
    assert positions == sorted(positions)
    provenance = page[positions[-1]:]
    assert "provenance of" in provenance and "provenance of" not in page[:positions[-1]]
    assert provenance.rstrip().endswith("</details>\n</body></html>")
    # each contents entry links to a section that exists
    anchors = re.findall(r'<li><a href="#([^"]+)">', page)
    assert anchors and all(f'id="{a}"' in page for a in anchors)
    # the summary holds each arm's Δ val loss with its CI and p, read here from paired.csv with pandas
    head = page[positions[0]:positions[1]]
    paired = pd.read_csv(real_demo_dir / "paired.csv")
    for _, row in paired.iterrows():
        cells = [row[f"val_loss_{c}"] for c in ("diff_mean", "diff_ci_low", "diff_ci_high", "p")]
        expected = "".join(f'<td class="n">{fmt_cell(float(v))}</td>' for v in cells)
        assert f"<td>val_loss</td>{expected}" in head
    # the alignment figure is in the summary, drawn once in the page
    assert head.count("<img") == 1 and "align_mlp_mid against normalised depth" in head
    assert page.count("<img") == len(summary["figures"])
    assert all(t.startswith('<div class="scroll"><table>') for t in re.findall(r"<div[^>]*><table>", page))
    assert page.count("<table>") == page.count('<div class="scroll"><table>')


def _probe_folders(tmp_path):
    """Two probe folders; the second model lacks mlp_influence (a probe run with fewer statistics)."""
    full = result_table({"uniform-6": (256,) * 6})
    part = result_table({"tapered-4": (384, 320, 192, 128)}, stats=("align_mlp_mid", "block_influence"))
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d, t in zip(dirs, (full, part), strict=True):
        write_results(d, t, None, {"backend": "native"})
    return dirs, full, part


def test_plot_notes_stand_next_to_their_figure(tmp_path):
    dirs, full, part = _probe_folders(tmp_path)
    notes: list[str] = []
    build_figure(dirs, PlotOptions(kind="depth", statistic=("mlp_influence",), size="300x200", dpi=40),
                 notes=notes)  # what `tlm plot` prints for this figure
    assert notes == ["skipped tapered-4: no mlp_influence in its results"]
    sections = probe_sections([ProbeResult(full, None, {}, dirs[0]), ProbeResult(part, None, {}, dirs[1])],
                              (300, 200), 40)
    blocks = {b.name: b for s in sections for b in s.blocks if isinstance(b, FigureBlock)}
    # mlp_influence is a panel of a small-multiples figure (issue 47), whose notes are its panels'
    (depth,) = [b for n, b in blocks.items() if n.startswith("depth") and "mlp_influence" in b.caption]
    assert depth.notes == notes
    assert blocks["importance"].notes == notes  # block_influence is there for both; mlp is not
    assert [b.notes for n, b in blocks.items() if n.endswith("align_mlp_mid")] == [[]]
    page = render_html(Document("t", sections))
    figure = re.search(r"<figure>(?:(?!</figure>).)*mlp_influence against(?:(?!</figure>).)*</figure>", page)
    assert figure and '<p class="fignote">skipped tapered-4: no mlp_influence in its results</p>' in figure[0]


def _measure(page_path, tmp_path) -> dict:
    probe = tmp_path / "measure.html"
    probe.write_text(page_path.read_text().replace("</body>", PROBE_JS + "</body>"), encoding="utf-8")
    dom = _chromium("--dump-dom", f"--window-size={WIDTH},900", "--hide-scrollbars",
                    "--virtual-time-budget=10000", probe.resolve().as_uri()).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[-2000:]
    found = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body[0]))
    return {"scroll_width": int(found["scroll-width"]), "boxes": int(found["boxes"]), "dom": dom}


def test_no_sideways_scroll_at_1280px_in_chromium(demo_report, tmp_path):
    _chromium_or_skip()
    out, _ = demo_report
    seen = _measure(out / "report.html", tmp_path)
    assert seen["scroll_width"] <= WIDTH
    assert seen["boxes"] >= 1  # the paired table is wider than the page: it scrolls in its own box
    dom = seen["dom"]
    assert _at(dom, 'id="summary"') < _at(dom, 'id="provenance"')
    # the measurement can see an overflow: a table 3000 px wide outside a box makes the page scroll
    wide = tmp_path / "wide.html"
    wide.write_text('<!DOCTYPE html><html><body><table><tr><td style="min-width:3000px">x</td></tr></table>'
                    "</body></html>")
    assert _measure(wide, tmp_path)["scroll_width"] > WIDTH


def test_summary_of_one_seed_and_adjusted_p_and_eval_headline(tmp_path):
    from tlm_probe.plotting.inputs import Comparison
    from tlm_probe.report.summary import comparison_summary, eval_headline

    nan = float("nan")
    paired = pd.DataFrame({"arm": ["linear", "cosine"], "baseline": "uniform", "n_pairs": [1, 3],
                           "val_loss_diff_mean": [-0.02, -0.03], "val_loss_diff_ci_low": [nan, -0.05],
                           "val_loss_diff_ci_high": [nan, -0.01], "val_loss_p": [nan, 0.016],
                           "val_loss_p_holm": [nan, 0.032]})
    table, *texts = comparison_summary([Comparison(tmp_path / "cmp", {"paired": paired}, pd.DataFrame()),
                                        Comparison(tmp_path / "empty", {}, pd.DataFrame())])
    row = table.frame.set_index("arm").loc["cosine"]
    assert (row["Δ (arm − baseline)"], row["p"], row["p (adjusted)"]) == (-0.03, 0.016, 0.032)
    assert [t.text.split(":")[0] for t in texts] == [
        "empty", "a row with fewer than 2 paired seeds has no CI and no p"]
    ev = pd.DataFrame({"model": ["a", "a", "b", "b"], "task": "t", "metric": ["acc", "acc_norm"] * 2,
                       "value": [0.5, 0.6, 0.7, 0.8]})
    headline = eval_headline(ev).frame.to_dict("list")
    assert headline == {"task": ["t"], "metric": ["acc"], "a": [0.5], "b": [0.7]}
