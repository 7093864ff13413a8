"""tlm compare --eval-tasks: eval columns per arm and seed in the tables and paired tests; tlm report
shows them and `tlm eval` folders."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tlm_probe.data.stream import TokenData
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train.arms import run_name
from tlm_probe.train.compare import compare_arms
from tlm_probe.train.config import TrainConfig

BASE = TrainConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, multiple_of=16, seq_len=16, batch_size=2,
                   steps=2, eval_interval=2, eval_tokens=32, warmup=1, progress=False, data="synthetic",
                   threads=1)
ARMS = ["uniform", "cosine:1.5:0.5"]


@pytest.fixture(scope="module")
def evaluated_comparison(tmp_path_factory):
    from tlm_probe.eval.columns import eval_hook
    from tlm_probe.eval.run import EvalOptions

    ids = np.random.default_rng(1).integers(97, 110, size=2000).astype(np.uint32)
    data = TokenData(ids[:1600], ids[1600:], ByteTokenizer(), "synthetic", 256)
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    hook = eval_hook(EvalOptions(tasks=["pydoc-lastword"], limit=3))
    compare_arms(BASE, ARMS, [0, 1], out, data=data, after_run=hook)
    return out, data, hook


def test_eval_columns_per_arm_and_seed_and_paired(evaluated_comparison):
    out, _, _ = evaluated_comparison
    res = pd.read_csv(out / "results.csv")
    cols = ["pydoc-lastword:perplexity", "pydoc-lastword:acc"]
    assert set(cols) <= set(res.columns)
    for _, row in res.iterrows():  # each value is what that run's own eval folder says
        ev = pd.read_csv(out / "runs" / run_name(row["arm"], row["seed"]) / "eval" / "results.csv")
        for c in cols:
            task, metric = c.split(":")
            mine = ev[(ev["task"] == task) & (ev["metric"] == metric)]["value"].iloc[0]
            assert row[c] == pytest.approx(mine)
    summary = pd.read_csv(out / "summary.csv").set_index("arm")
    paired = pd.read_csv(out / "paired.csv").set_index("arm")
    c = "pydoc-lastword:perplexity"
    a = res[res["arm"] == "cosine:1.5:0.5"].sort_values("seed")[c].to_numpy()
    b = res[res["arm"] == "uniform"].sort_values("seed")[c].to_numpy()
    assert summary.loc["uniform", f"{c}_mean"] == pytest.approx(b.mean())
    d = a - b
    assert paired.loc["cosine:1.5:0.5", f"{c}_diff_mean"] == pytest.approx(d.mean())
    assert paired.loc["cosine:1.5:0.5", f"{c}_t"] == pytest.approx(d.mean() / (d.std(ddof=1) / math.sqrt(2)))


def test_continuing_does_not_evaluate_again(evaluated_comparison):
    out, data, hook = evaluated_comparison
    stamp = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/eval/results.csv")}
    assert len(stamp) == 4
    compare_arms(BASE, ARMS, [0, 1], out, data=data, after_run=hook)
    assert {p: p.stat().st_mtime_ns for p in stamp} == stamp
    assert "pydoc-lastword:acc" in pd.read_csv(out / "results.csv").columns


def test_report_shows_eval_columns_and_eval_folders(evaluated_comparison):
    from tlm_probe.report.html import Table
    from tlm_probe.report.sections import build_document

    out, _, _ = evaluated_comparison
    ev = out / "runs" / run_name("uniform", 0) / "eval"
    doc = build_document([out, ev], title="t", size=(400, 300), dpi=40)
    tables = [b for s in doc.sections for b in s.blocks if isinstance(b, Table)]
    assert any("pydoc-lastword:acc_mean" in t.frame.columns for t in tables)
    evaluation = next(s for s in doc.sections if s.title == "Evaluation")
    wide = evaluation.blocks[0].frame
    assert set(wide["task"]) == {"pydoc-lastword"} and "uniform-s0" in wide.columns


def test_cli_bad_eval_tasks_fail_before_training(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    res = CliRunner().invoke(app, ["compare", "--out", str(tmp_path / "c"), "--schedules", "uniform",
                                   "--seeds", "0", "--eval-tasks", "nope.yaml"])
    assert res.exit_code == 1 and "task config not found" in res.stderr
    assert not (tmp_path / "c").exists()
