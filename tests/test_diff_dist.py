"""`tlm diff` under torchrun (issue 33): each rank streams its share of the sequences, every sum is
all-reduced, and two gloo ranks give one process's diff.json; only rank 0 writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from tlm_probe.capture import wrap_model
from tlm_probe.diff import engine
from tlm_probe.diff.engine import run_diff
from tlm_probe.diff.options import DiffOptions
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

ROOT = Path(__file__).resolve().parents[1]
V, D = 64, 32
# one rank's float32 forward of a sequence may round differently in another batch (~1e-7 relative), and
# float64 sums added in another order differ by ~1e-16: both far inside this
TOL = 1e-6


def _model(d_ff, seed) -> TaperedLM:
    torch.manual_seed(seed)
    cfg = TLMConfig(vocab_size=V, d_model=D, n_layers=len(d_ff), n_heads=4, d_ff=tuple(d_ff), max_seq_len=64)
    return TaperedLM(cfg).eval()


def _close(a, b) -> bool:
    a = np.array(a, dtype=float)
    b = np.array(b, dtype=float)
    return a.shape == b.shape and np.allclose(a, b, atol=TOL, rtol=TOL, equal_nan=True)


def test_a_rank_streams_its_share_and_the_shares_add_up(monkeypatch):
    """Without torchrun's group: rank r of 2 diffs sequences r, r + 2, ...; its sums and the other rank's
    add to one process's sums (what the all-reduce does)."""
    a, b = wrap_model(_model((64, 48, 32), 0), name="a"), wrap_model(_model((32, 48, 64), 1), name="b")
    seqs = [list(map(int, row)) for row in np.random.default_rng(0).integers(1, V, (7, 16))]
    opts = DiffOptions(batch_size=2, device="cpu", stats="align_mlp_mid")
    whole = engine._stream(a, b, seqs, opts, ("align_mlp_mid",))
    parts = []
    for r in (0, 1):
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", str(r))
        parts.append(engine._stream(a, b, seqs, opts, ("align_mlp_mid",)))
    assert [p.n for p in parts] == [4 * 16, 3 * 16] and whole.n == 7 * 16
    assert torch.allclose(parts[0].cka.merge_(parts[1].cka).value(), whole.cka.value(), atol=1e-9)
    assert torch.allclose(parts[0].drift_sum + parts[1].drift_sum, whole.drift_sum, atol=1e-9)
    assert torch.allclose(parts[0].tokens.sums + parts[1].tokens.sums, whole.tokens.sums, atol=1e-9)
    merged = parts[0].stats.diff.state + parts[1].stats.diff.state
    assert torch.allclose(merged, whole.stats.diff.state, atol=1e-9)


def test_two_gloo_ranks_equal_one_process(tmp_path):
    save_tlm(_model((64, 48, 32, 64), 0), tmp_path / "a")
    save_tlm(_model((96, 64, 32, 32), 1), tmp_path / "b")
    ids = np.random.default_rng(0).integers(1, V, 7 * 24 + 5).astype(np.uint32)  # 8 sequences, ragged end
    np.save(tmp_path / "ids.npy", ids)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "cli.py"), "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--data",
           str(tmp_path / "ids.npy"), "--out", str(tmp_path / "dist"), "--seq-len", "24", "--batch-size", "2",
           "--max-tokens", "0", "--device", "cpu", "--stats", "align_mlp_mid,mlp_influence", "--json"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "dist" / "diff.json").read_text())
    assert json.loads(r.stdout)["out"] == str(tmp_path / "dist")  # rank 0 alone printed its one document
    one = run_diff(str(tmp_path / "a"), str(tmp_path / "b"),
                   DiffOptions(data=str(tmp_path / "ids.npy"), seq_len=24, batch_size=2, max_tokens=0,
                               device="cpu", stats="align_mlp_mid,mlp_influence")).summary
    assert doc["world_size"] == 2 and one["world_size"] == 1
    assert doc["n_tokens"] == one["n_tokens"] == ids.size and doc["n_predictions"] == one["n_predictions"]
    for key in ("cka", "cka_mlp", "drift", "kl_mean", "dnll_mean", "best_match"):
        assert _close(doc[key], one[key]), key
    assert doc["kl_mean"] > 1e-3 and np.nanmin(np.array(doc["cka"], dtype=float)) < 0.99  # not trivial
    bucket = lambda s: {(b["bucket_kind"], b["bucket"]): (b["kl_mean"], b["dnll_mean"], b["n"])  # noqa: E731
                        for b in s["buckets"]}
    assert bucket(doc).keys() == bucket(one).keys()
    assert all(_close(bucket(doc)[k], bucket(one)[k]) for k in bucket(one))
    columns = ("value_a", "value_b", "diff", "ci_low", "ci_high", "n", "n_tokens")
    rows = lambda s: [[r[c] for c in columns] for r in s["stats"]]  # noqa: E731
    assert _close(rows(doc), rows(one))


def test_only_rank_0_claims_the_folder(tmp_path, monkeypatch):
    """A rank other than 0 writes nothing (the folder, its lock and its files are rank 0's)."""
    from typer.testing import CliRunner

    from cli import app

    save_tlm(_model((64, 64), 0), tmp_path / "a")
    save_tlm(_model((64, 64), 0), tmp_path / "a2")  # a copy: the same folder twice is refused
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(1, V, (4, 16)).astype(np.uint32))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr("tlm_probe.diff.engine.process_group", _no_group)
    monkeypatch.setattr("tlm_probe.ranks.process_group", _no_group)
    res = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(tmp_path / "a2"), "--data",
                                   str(tmp_path / "ids.npy"), "--out", str(tmp_path / "d"),
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "d").exists() and res.output == ""


def _no_group():
    import contextlib

    return contextlib.nullcontext()
