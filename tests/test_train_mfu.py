"""MFU (training FLOPs per token x tokens/s / the device's peak FLOP/s): --peak-flops, the GPU table, or on a
CPU its measured matmul peak (train/cpu_peak.py, cached); in run.json and in the progress lines, beside
metrics.jsonl's per-step values."""

import json
import re

import pytest
from test_train import TINY, byte_data

from tlm_probe.models.accounting import train_flops_per_token
from tlm_probe.models.io import load_tlm
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.training import PlainLines, run_training


def test_run_json_and_progress_lines_carry_the_mfu(tmp_path, capsys):
    tc = TrainConfig(**{**TINY, "progress": True}, steps=4, peak_flops=1e9)
    summary = run_training(tc, tmp_path / "run", data=byte_data())
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    flops = train_flops_per_token(load_tlm(tmp_path / "run").cfg, TINY["seq_len"])  # the accounting, anew
    assert doc["peak_flops"] == 1e9 and summary["mfu"] == doc["mfu"]
    assert doc["mfu"] == pytest.approx(doc["tokens_per_s"] * flops / 1e9)
    err = capsys.readouterr().err  # stderr is not a terminal here: plain progress lines
    first = re.search(r"train step 1/4: loss [\d.]+, tok/s ([\d,]+), mfu ([\d.]+)%, eta", err)
    assert first, err
    tps = float(first[1].replace(",", ""))  # the line's own rounding of the step's rate and of its MFU
    assert float(first[2]) == pytest.approx(100 * tps * flops / 1e9, abs=0.05 + 100 * flops / 1e9)


def test_a_cpu_run_reports_mfu_against_its_measured_peak(tmp_path, capsys):
    from tlm_probe.train.cpu_peak import SIZE, cpu_peak_flops, measure

    run_training(TrainConfig(**{**TINY, "progress": True}, steps=2), tmp_path / "cpu", data=byte_data())
    doc = json.loads((tmp_path / "cpu" / "run.json").read_text())
    assert doc["peak_flops"] == cpu_peak_flops() and 0 < doc["mfu"] < 1
    assert "mfu" in capsys.readouterr().err
    # the cached peak is a matmul rate of this machine (2·n^3 FLOPs per SIZE x SIZE product): a fresh
    # measurement does not beat it by more than a factor 3. Not a lower bound: processes sharing the cores
    # (a loaded CI machine) slow a fresh measurement by more than that.
    assert 1e8 < doc["peak_flops"] and measure() < doc["peak_flops"] * 3 and SIZE == 1024


def test_plain_line_mfu_is_its_own_rate_times_flops_over_peak(capsys):
    lines = PlainLines(10, "train", True, 0, 0, flops_per_peak=0.008246)
    lines.update(1, 2.5, 100, 50.0)  # 50 tok/s x 0.008246 = 41.2%
    lines.update(2, 2.5, 200, 50.0)  # not due yet: the second line waits for a tenth of the run
    assert capsys.readouterr().err.startswith("train step 1/10: loss 2.5000, tok/s 50, mfu 41.2%, eta ")
