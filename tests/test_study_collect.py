"""analyses.study collect keeps the committed sections of parts whose runs are not on this machine.

Before, collect rebuilt summary.md from the runs under --root alone, so collecting one part on a machine
without the other parts' runs wiped their committed numbers."""

from __future__ import annotations

import argparse

from analyses import study


def test_collect_without_runs_keeps_every_committed_section(tmp_path, monkeypatch):
    results = tmp_path / "results"
    sections = {"motivating": "## motivating\n\n| a | b |\n\n", "mechanism": "## mechanism: x\n\ntext\n\n"}
    for part, text in sections.items():
        (results / part).mkdir(parents=True)
        (results / part / "section.md").write_text(text)
    monkeypatch.setattr(study, "RESULTS", results)
    opts = argparse.Namespace(root=tmp_path / "runs", scale="cpu", parts="")
    (tmp_path / "runs").mkdir()
    study.collect(opts)
    summary = (results / "summary.md").read_text()
    assert summary.startswith("# Reproduction study: the numbers\n\n")
    assert summary.endswith(sections["motivating"] + sections["mechanism"])  # in the parts' order
    assert (results / "motivating" / "section.md").read_text() == sections["motivating"]


def test_parts_selects_what_eval_and_collect_touch():
    opts = argparse.Namespace(parts="mixers,components")
    assert [p for p in study.TRAINED if study._chosen(opts, p)] == ["mixers", "components"]
    assert study._chosen(argparse.Namespace(parts=""), "allocation")
