"""`tlm report` given a `tlm diff` folder beside a probe folder (issue 33): a "Diff" section with the diff's
figure and its numbers, copied from diff.json and checked here against the file, HTML-escaped, the page
self-contained (the figure embedded, nothing fetched, no script)."""

from __future__ import annotations

import base64
import html
import io
import json
import re

import numpy as np
import torch
from PIL import Image
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.report.html import fmt_cell

EVIL = "m<i>&'1"  # a model folder name: the diff's model names come from data
runner = CliRunner()


def _model(d_ff, seed) -> TaperedLM:
    torch.manual_seed(seed)
    cfg = TLMConfig(vocab_size=64, d_model=32, n_layers=len(d_ff), n_heads=4, d_ff=tuple(d_ff),
                    max_seq_len=64)
    return TaperedLM(cfg).eval()


def _cells(table_html: str) -> list[list[str]]:
    """The body rows' cells (the header row has <th> cells only)."""
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table_html)]
    return [row for row in rows if row]


def test_the_report_has_a_diff_section_with_the_numbers_of_diff_json(tmp_path):
    save_tlm(_model((64, 48, 32), 0), tmp_path / EVIL)
    save_tlm(_model((32, 48, 64), 1), tmp_path / "b")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(1, 64, (8, 16)).astype(np.uint32))
    common = ["--data", str(ids), "--max-tokens", "0", "--device", "cpu"]
    made = runner.invoke(app, ["diff", str(tmp_path / EVIL), str(tmp_path / "b"), *common, "--stats",
                               "mlp_influence", "--out", str(tmp_path / "d")])
    assert made.exit_code == 0, made.output
    probed = runner.invoke(app, ["probe", str(tmp_path / "b"), *common, "--out", str(tmp_path / "p")])
    assert probed.exit_code == 0, probed.output
    r = runner.invoke(app, ["report", str(tmp_path / "p"), str(tmp_path / "d"), "--out", str(tmp_path / "r"),
                            "--size", "600x300", "--dpi", "60", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())
    summary = json.loads(r.stdout)
    title = f"Diff: {EVIL} vs b"
    assert title in summary["sections"] and "Probe results" in summary["sections"]
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<script" not in page.lower() and "<i>" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", page)
    section = re.search(rf"<h2>{re.escape(html.escape(title))}</h2>(.*?)</section>", page, re.S)
    assert section, "no Diff section"
    body = section.group(1)
    (png,) = re.findall(r'src="data:image/png;base64,([^"]+)"', body)  # the figure, embedded
    with Image.open(io.BytesIO(base64.b64decode(png))) as im:
        assert im.size == (600, 300)
    tables = re.findall(r"<table>(.*?)</table>", body, re.S)
    assert len(tables) == 3  # headline, per layer, --stats
    (head,) = _cells(tables[0])
    diag = float(np.mean(np.diag(np.array(doc["cka"], dtype=float))))  # equal depths: layer with layer
    assert head[:2] == [html.escape(EVIL), "b"]
    assert head[3:6] == [fmt_cell(doc["kl_mean"]), fmt_cell(doc["dnll_mean"]), fmt_cell(diag)]
    layers = _cells(tables[1])
    assert [int(row[3]) for row in layers] == doc["best_match"]
    assert [row[5] for row in layers] == [fmt_cell(v) for v in doc["drift"]]
    assert [row[4] for row in layers] == [fmt_cell(row[b]) for row, b in zip(doc["cka"], doc["best_match"],
                                                                              strict=True)]
    stats = _cells(tables[2])
    assert [row[4] for row in stats] == [fmt_cell(s["diff"]) for s in doc["stats"]]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "figures/diff-01.png" in md and (tmp_path / "r" / "figures" / "diff-01.png").is_file()
