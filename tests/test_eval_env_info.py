"""`tlm eval` spawns no process: lm-eval's per-call environment survey (`git describe`, torch's
collect_env with `pip list` and ten more subprocesses) is switched off, and the versions it would have
recorded are in our provenance instead (issue 24)."""

from __future__ import annotations

import json
import subprocess

import torch
from typer.testing import CliRunner

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer


def _tiny(folder):
    torch.manual_seed(0)
    save_tlm(TaperedLM(TLMConfig(d_model=16, n_layers=2, n_heads=2, d_ff=(32, 16), max_seq_len=512)), folder)
    ByteTokenizer().save(folder)
    return folder


def test_tlm_eval_spawns_no_subprocess_and_prints_no_git_error(tmp_path, monkeypatch, capfd):
    from cli import app

    model = _tiny(tmp_path / "tiny")
    work = tmp_path / "not-a-repo"  # outside any git checkout: `git describe` would print "fatal: ..."
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # even if tmp lies inside a checkout
    spawned: list = []
    real = subprocess.Popen

    class Recording(real):
        def __init__(self, args, *a, **k):
            spawned.append(args)
            super().__init__(args, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    out = tmp_path / "ev"
    args = ["eval", str(model), "--tasks", "pydoc-mc", "--limit", "3", "--out", str(out), "--threads", "1",
            "--json"]
    res = CliRunner().invoke(app, args)
    monkeypatch.undo()
    assert res.exit_code == 0, res.output
    assert spawned == []
    assert "not a git repository" not in capfd.readouterr().err
    versions = json.loads((out / "provenance.json").read_text())["versions"]
    assert {"lm_eval", "torch", "transformers", "python", "tlm_probe"} <= set(versions)
