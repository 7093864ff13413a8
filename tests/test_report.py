"""The report: self-contained, escaped HTML and Markdown, written all-or-nothing; it renders in headless
Chromium to a non-blank page in which a model name holding <script> is text, not markup."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from plotting_tables import matrix_table, real_probe_results, result_table
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.report.html import Document, Section, Table, fmt_cell, write_report
from tlm_probe.report.sections import probe_sections, wide_table
from tlm_probe.results import ProbeResult

EVIL = "tiny<script>alert('x')&$x$"  # a real model folder name: the model name comes from data
CHROMIUM = Path("/usr/bin/chromium")
runner = CliRunner()


@pytest.fixture(scope="module")
def report_dir(real_probe_dirs, tmp_path_factory):
    """`tlm report` on real probe folders, one of them of a model whose folder name holds <script>."""
    tmp = tmp_path_factory.mktemp("report")
    evil = real_probe_results(tmp, models={EVIL: ("cosine:1.5:0.5", 4)})[EVIL]
    inputs = [str(p) for p in real_probe_dirs.values()] + [str(evil)]
    r = runner.invoke(app, ["report", *inputs, "--out", str(tmp / "out"), "--size", "500x350", "--dpi", "60",
                            "--title", "report <b>title</b>", "--json"])
    assert r.exit_code == 0, r.output
    return tmp / "out", json.loads(r.stdout)


def test_html_is_escaped_and_self_contained(report_dir, real_probe_dirs):
    out, summary = report_dir
    page = (out / "report.html").read_text()
    assert "<script" not in page.lower()  # the page has no script of its own, and data cannot add one
    assert "tiny&lt;script&gt;alert(&#x27;x&#x27;)&amp;$x$" in page
    assert "&lt;b&gt;title&lt;/b&gt;" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", page)  # nothing fetched
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == len(summary["figures"]) == _expected_figures(real_probe_dirs)
    with Image.open(io.BytesIO(base64.b64decode(images[0]))) as im:
        assert im.size == (500, 350)
    sections = ["Probe results", "Statistics vs depth", "Layer importance", "Layer × layer", "Tables"]
    assert summary["sections"] == sections and all(f"<h2>{s}</h2>" in page for s in sections)
    # the per-model Spearman rows (agreement.csv) are a table, not a figure
    assert "Spearman agreement of each proxy" in page and "spearman_taylor_mlp" in page


def _expected_figures(dirs) -> int:
    """Counted from the result files with pandas: of the statistics that have per-layer rows (at most 16),
    the first at full size and the others in small multiples of up to six panels (issue 47), one importance
    figure, one heatmap per matrix statistic with all n x n cells."""
    results = pd.concat(pd.read_csv(d / "results.csv") for d in dirs.values())
    per_layer = results.loc[results.layer >= 0, "statistic"].nunique()
    mats = pd.concat(pd.read_csv(d / "matrices.csv") for d in dirs.values())
    counts = mats.groupby(["statistic", "model"]).size().reset_index(name="cells")
    counts["n"] = [mats[(mats.statistic == s) & (mats.model == m)][["layer_i", "layer_j"]].max().max() + 1
                   for s, m in zip(counts.statistic, counts.model, strict=True)]
    full = (counts.cells == counts.n**2).groupby(counts.statistic).all().sum()
    assert full == 3  # angular_distance, angular_distance_last, cka_linear; drop_block_best is sparse
    return 1 + math.ceil((min(per_layer, 16) - 1) / 6) + 1 + full


def test_report_of_a_real_demo(real_demo_dir, tmp_path):
    r = runner.invoke(app, ["report", str(real_demo_dir), "--out", str(tmp_path / "rep"), "--size", "400x300",
                            "--dpi", "50", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    # the probe folders inside the demo join the report, then the comparison itself
    assert summary["sections"][:2] == ["Probe results", "Statistics vs depth"]
    assert summary["sections"][-1] == "Comparison: demo"
    page = (tmp_path / "rep" / "report.html").read_text()
    paired = pd.read_csv(real_demo_dir / "paired.csv")
    assert "each arm against uniform" in page and "val_loss_p" in page
    assert f"{paired.val_loss_p.iloc[0]:.4g}" in page  # the paired test's p-value, as written by compare
    assert any(Path(f).name.startswith("curves-") for f in summary["figures"])


def test_matrices_section_from_a_matrix_table(tmp_path):
    models = {"a": (64,) * 5, "b": (96, 64, 32)}
    pr = ProbeResult(result_table(models), matrix_table(models, "cka"), {}, tmp_path)
    sections = probe_sections([pr], (400, 300), 50)
    (matrix,) = [s for s in sections if s.title == "Layer × layer"]
    (fig_block,) = matrix.blocks
    fig = fig_block.make()
    assert [ax.images[0].get_array().shape for ax in fig.axes if ax.images] == [(5, 5), (3, 3)]


def test_markdown_escapes_and_links_figures(report_dir):
    out, summary = report_dir
    md = (out / "report.md").read_text()
    assert "<script" not in md and "&lt;script&gt;" in md
    links = re.findall(r"\]\((figures/[^)]+\.png)\)", md)
    assert links and all((out / link).is_file() for link in links)
    assert sorted(str(out / link) for link in links) == sorted(summary["figures"])


def test_wide_table_matches_the_tidy_rows():
    df = result_table()
    wide = wide_table(df, "tapered-4")
    assert list(wide.columns[:3]) == ["layer", "depth", "d_ff"]
    row = df[(df.model == "tapered-4") & (df.layer == 2) & (df.statistic == "mlp_influence")].iloc[0]
    assert wide.loc[wide.layer == 2, "mlp_influence"].item() == row.value
    assert wide.d_ff.tolist() == [384, 320, 192, 128]


def test_write_is_all_or_nothing(tmp_path):
    doc = Document("t", [Section("s", [Table("c", result_table().head(3))])])
    out = tmp_path / "rep"
    write_report(doc, out)
    first = (out / "report.html").read_text()
    write_report(Document("second", doc.sections), out)  # an earlier report is replaced as a whole
    assert (out / "report.html").read_text() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no temporary folders left
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty and tlm did not write it"):
        write_report(doc, other)
    assert (other / "keep.txt").read_text() == "mine"


def _chromium_or_skip() -> None:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (apt-get install -y chromium)")
        pytest.skip("/usr/bin/chromium is absent (apt-get install -y chromium); CI installs it")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="tlm-chromium-")
    try:
        cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_report_renders_in_headless_chromium(report_dir, tmp_path):
    _chromium_or_skip()
    out, summary = report_dir
    url = (out / "report.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    run = _chromium(f"--screenshot={shot}", "--window-size=1000,1400", "--hide-scrollbars", url)
    assert shot.is_file(), run.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1000, 1400)
        pixels = np.asarray(im.convert("L"), dtype=float)
    assert pixels.std() > 20 and (pixels < 200).mean() > 0.02  # text and figures, not a blank page
    dom = _chromium("--dump-dom", url).stdout
    assert "<script" not in dom.lower() and "&lt;script&gt;" in dom  # the name is text in the DOM
    assert dom.count("<img") == len(summary["figures"])


def test_cells_format_numbers_and_blank_missing_values():
    assert [fmt_cell(v) for v in (pd.NA, None, float("nan"), 1.23456789, 12345.0, 7, True, "a<b")] == [
        "", "", "", "1.235", "12,345", "7", "True", "a<b"]  # escaping happens when the cell is written


def test_report_bad_input_is_one_line_exit_1(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    cases = [([str(tmp_path / "missing")], "input not found"),
             ([str(tmp_path / "busy")], "is not a probe result")]
    for inputs, message in cases:
        r = runner.invoke(app, ["report", *inputs, "--out", str(tmp_path / "rep")])
        assert r.exit_code == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]  # nothing written
    assert runner.invoke(app, ["report", "--out", str(tmp_path / "rep")]).exit_code == 2
    assert "Example: tlm report" in runner.invoke(app, ["report", "--help"]).stdout


def test_report_options_are_the_library_defaults_and_the_library_takes_them(real_probe_dirs):
    """`tlm report`'s page options are ReportOptions' fields (issue 32): one default for CLI and library."""
    import typer.main

    from tlm_probe.commands.options import cli_fields
    from tlm_probe.report.options import ReportOptions
    from tlm_probe.report.sections import build_document

    params = {p.name: p for p in typer.main.get_group(app).commands["report"].params}
    for f in cli_fields(ReportOptions):
        assert params[f.name].default == f.default, f.name
    assert params["out"].required and params["overwrite"].default is False
    assert ReportOptions(size=(500, 350)).pixels == (500, 350)
    with pytest.raises(UserError, match="out of range"):
        ReportOptions(size="4x3")
    doc = build_document(list(real_probe_dirs.values())[:1], ReportOptions(title="t", size="400x300", dpi=40))
    assert doc.title == "t" and doc.figures()
    with pytest.raises(TypeError, match="not both"):
        build_document(list(real_probe_dirs.values())[:1], ReportOptions(), title="t")
