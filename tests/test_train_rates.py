"""run.json reports the step-only rate and the end-to-end rate (evaluations and checkpoints included)."""

import json

import pytest
from test_train import train


def test_run_json_has_step_and_end_to_end_rates(tmp_path):
    summary = train(tmp_path, "rates", steps=6, eval_interval=2)
    doc = json.loads((tmp_path / "rates" / "run.json").read_text())
    assert doc["end_to_end_tokens_per_s"] == pytest.approx(doc["tokens"] / doc["wall_s"])
    # evaluations every 2 steps happen outside the step: end to end is slower than the step alone
    assert 0 < doc["end_to_end_tokens_per_s"] < doc["tokens_per_s"]
    assert summary["end_to_end_tokens_per_s"] == doc["end_to_end_tokens_per_s"]
