"""A `tlm trust` folder in `tlm plot` and `tlm report` (issue 33 part 2: a flagged proxy is flagged "in the
table, the console and the report"): the figure's cells carry trust.csv's numbers, a cell is marked ✗
exactly where the test's own reading of the thresholds puts it below one, the report's Trust section
names the flagged statistics as trust.csv flags them, and a malformed folder is one error line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli import app
from tlm_probe.plotting.figures import build_figure

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "analyses" / "results" / "trust" / "SmolLM2-135M-Q4_1-task16"  # a real model's trust folder
COLUMNS = ["kendall_w", "min_pairwise_spearman", "spearman_with_target", "spearman_with_task"]
runner = CliRunner()


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts]


def test_the_figure_shows_each_number_and_marks_exactly_the_cells_below_a_threshold():
    table = pd.read_csv(REAL / "trust.csv")
    summary = json.loads((REAL / "trust.json").read_text())
    fig = build_figure([REAL], kind="trust", size=(1000, 600), dpi=60)
    texts = _texts(fig)
    assert len(texts) == len(table) * len(COLUMNS)  # one per cell, row by row
    want_marks = 0
    for i, row in table.iterrows():
        for j, col in enumerate(COLUMNS):
            text, value = texts[i * len(COLUMNS) + j], row[col]
            if np.isnan(value):
                assert text == "—"
                continue
            low = summary["min_w"] if col == "kendall_w" else summary["min_spearman"]
            below = value < low
            want_marks += below
            assert text.startswith("✗ ") == below, (row["statistic"], col, text)
            assert float(text.removeprefix("✗ ")) == pytest.approx(value, abs=0.005)
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == want_marks > 0


def test_the_report_names_the_flagged_statistics_as_trust_csv_flags_them(tmp_path):
    r = runner.invoke(app, ["report", str(REAL), "--out", str(tmp_path / "r"), "--size", "600x400", "--dpi",
                            "50", "--json"])
    assert r.exit_code == 0, r.output
    table = pd.read_csv(REAL / "trust.csv")
    flagged = table.loc[table["flags"] != "ok", "statistic"].tolist()
    assert json.loads(r.stdout)["sections"] == ["Trust: SmolLM2-135M-Instruct.Q4_1"]
    page = (tmp_path / "r" / "report.md").read_text().replace("\\_", "_")
    assert f"{len(flagged)} of {len(table)} statistics flagged: {', '.join(flagged)}" in page
    assert "passing every check: norm_ratio_mlp" in page
    assert "pydoc-mc: 16 items, clean accuracy 0.500" in page


def test_plot_trust_writes_the_figure_and_other_kinds_say_what_it_is(tmp_path):
    r = runner.invoke(app, ["plot", str(REAL), "--out", str(tmp_path / "t.png"), "--size", "600x400"])
    assert r.exit_code == 0 and (tmp_path / "t.png").stat().st_size > 0, r.output
    r = runner.invoke(app, ["plot", str(REAL), "--kind", "importance", "--out", str(tmp_path / "i.png")])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and "is a trust folder with no probe results" in lines[0]


@pytest.mark.parametrize("damage", ["not json", "no corpora", "word in a number column", "task of a word",
                                    "threshold a word"])
def test_a_malformed_trust_folder_is_one_error_line(tmp_path, damage):
    folder = tmp_path / "t"
    shutil.copytree(REAL, folder)
    if damage == "not json":
        (folder / "trust.json").write_text("{")
    elif damage == "no corpora":
        (folder / "trust.json").write_text(json.dumps({"min_w": 0.7, "min_spearman": 0.5}))
    elif damage in ("task of a word", "threshold a word"):
        doc = json.loads((folder / "trust.json").read_text())
        doc |= {"task_target": "x"} if damage == "task of a word" else {"min_w": "high"}
        (folder / "trust.json").write_text(json.dumps(doc))
    else:
        text = (folder / "trust.csv").read_text().splitlines()
        name, _, rest = text[1].partition(",")
        bad = f"{name},high,{rest.partition(',')[2]}"  # kendall_w is a word
        (folder / "trust.csv").write_text("\n".join([text[0], bad, *text[2:]]))
    commands = [["report", str(folder), "--out", str(tmp_path / "r")]]
    if damage != "task of a word":  # the figure does not read the task target
        commands.append(["plot", str(folder), "--out", str(tmp_path / "t.png")])
    for command in commands:
        r = runner.invoke(app, command)
        lines = r.output.strip().splitlines()
        assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (command, r.output)
        assert "Traceback" not in r.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "t.png").exists()
