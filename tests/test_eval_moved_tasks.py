"""An eval folder's task configs name their data file relative to themselves (so the folder can move);
`tlm eval --tasks MOVED/tasks/X.yaml` run from any working directory must score the same items as the
first run (the harness alone would resolve the data file against its working directory)."""

from __future__ import annotations

import json
import shutil

import torch
from typer.testing import CliRunner

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer


def _metric(stdout: str) -> dict:
    rows = json.loads(stdout)["results"]
    return {(r["task"], r["metric"]): r["value"] for r in rows}


def test_rerun_of_a_moved_eval_folder_from_elsewhere(tmp_path, monkeypatch):
    from cli import app

    torch.manual_seed(0)
    folder = tmp_path / "tiny"
    save_tlm(TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 32), max_seq_len=512)), folder)
    ByteTokenizer().save(folder)
    first = tmp_path / "ev"
    args = ["eval", str(folder), "--tasks", "pydoc-lastword", "--limit", "4", "--threads", "1", "--json"]
    res = CliRunner().invoke(app, [*args[:2], *args[2:], "--out", str(first)])
    assert res.exit_code == 0, res.output
    moved = tmp_path / "archive" / "ev"
    moved.parent.mkdir()
    shutil.move(first, moved)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    yaml = moved / "tasks" / "pydoc-lastword.yaml"
    again = CliRunner().invoke(app, ["eval", str(folder), "--tasks", str(yaml), "--limit", "4",
                                     "--threads", "1", "--json", "--out", str(tmp_path / "ev2")])
    assert again.exit_code == 0, again.output
    assert _metric(again.stdout) == _metric(res.stdout)
