"""The benchmarks still run against today's API: every arm once, on tiny models (the figures themselves
are printed by `python -m benchmarks`, never asserted)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models_zoo import build_model  # noqa: E402

from benchmarks import bench_costs, bench_probe, bench_train  # noqa: E402
from benchmarks.timing import line  # noqa: E402


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return build_model("gpt2", tmp_path_factory.mktemp("bench") / "gpt2")


def _check(results: dict) -> None:
    for name, r in results.items():
        assert "error" not in r, (name, r)
        assert line(name, r) if "median" in r else r


def test_probe_arms_run(gpt2, one_thread):
    _check(bench_probe.overhead("tiny", gpt2, 2, 16, rounds=1))
    _check(bench_probe.peers(gpt2, 2, 16, rounds=1))
    _check(bench_probe.first_batch(gpt2, 2, 16, rounds=1))


def test_cost_arms_run(tmp_path, gpt2):
    _check(bench_costs.weight_hash(gpt2, tmp_path, rounds=1))
    _check(bench_costs.info_vs_schedule(tmp_path, rounds=1))
    _check(bench_costs.corpus(tmp_path, rounds=1))
    _check(bench_costs.allocator(tmp_path, rounds=1, steps=1))


def test_train_arms_run(tmp_path, one_thread):
    size = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 256, "seq_len": 16, "batch_size": 2}
    _check(bench_train.arms(size, rounds=1, threads=1, out=tmp_path))
    _check(bench_train.end_to_end(size, steps=2, threads=1, out=tmp_path, repeats=1))


def test_one_command_runs_a_section_and_writes_json(tmp_path, one_thread, monkeypatch):
    import json

    from benchmarks.__main__ import main

    out = tmp_path / "b.json"
    argv = ["benchmarks", "--quick", "--only", "train", "--malloc", "system", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        main()
    finally:
        logging.disable(logging.NOTSET)  # main() silences warnings for the benchmark; not for other tests
    doc = json.loads(out.read_text())
    assert doc["malloc"] == "system" and set(doc["results"]) == {"train"}
    _check(doc["results"]["train"])


def test_ablation_restart_arms_run(tmp_path, one_thread):
    """The ablation benchmark against a restart from the cached clean stream: every arm once, and the
    ΔNLL of the probe (fused or not) and of run_importance equal the restart's (same forwards)."""
    import argparse

    from benchmarks import bench_importance
    from tlm_probe.capture import load_probe_model

    args = argparse.Namespace(floor="mlp_zero", rounds=1, batch=2, seq_len=16, batches=1, vocab=97)
    pm = load_probe_model(bench_importance.llama_folder(tmp_path / "llama", 3, 64, args.vocab))
    res = bench_importance.ablation_floor(pm, args, tmp_path)
    _check({k: res[k] for k in bench_importance.FLOOR_LINES})
    assert max(res["max_abs_dnll_difference"].values()) < 1e-5
    assert res["restart"].startswith("from the cached clean stream")
