"""`tlm eval` bootstraps lm-eval's stderr in its own process. Before, lm-eval forked a Pool of cpu_count
workers for it, and tearing that Pool down hung CI twice (Pool.terminate left a worker un-signalled and
joined it forever). The in-process path seeds its draws as the Pool did, so the numbers are the same."""

from __future__ import annotations

import json
import multiprocessing.pool
import os

import torch
from typer.testing import CliRunner

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer


def test_eval_starts_no_process_pool_and_still_reports_stderr(tmp_path, monkeypatch):
    from cli import app

    def refuse(*args, **kwargs):
        raise AssertionError("tlm eval started a multiprocessing Pool")

    monkeypatch.setattr(multiprocessing.pool.Pool, "__init__", refuse)
    monkeypatch.delenv("DISABLE_MULTIPROC", raising=False)
    torch.manual_seed(0)
    folder = tmp_path / "tiny"
    save_tlm(TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 32), max_seq_len=512)), folder)
    ByteTokenizer().save(folder)
    res = CliRunner().invoke(app, ["eval", str(folder), "--tasks", "pydoc-lastword", "--limit", "4",
                                   "--threads", "1", "--json", "--out", str(tmp_path / "ev")])
    assert res.exit_code == 0, res.output
    rows = {r["metric"]: r for r in json.loads(res.stdout)["results"]}
    assert rows["perplexity"]["stderr"] is not None  # the bootstrapped metric still has its stderr
    assert "DISABLE_MULTIPROC" not in os.environ  # set for the harness call only
