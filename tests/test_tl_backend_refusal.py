"""`tlm probe DISTILBERT --backend transformer-lens`: one `error:` line naming the backend and what to use
instead, from the config alone. It used to come after the load, behind transformers' 11-line load report
(a DistilBERT checkpoint carries its masked-LM head, which the bare model probed has no place for)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers as T
from families_zoo import FAMILY_MODELS
from models_zoo import CORPUS, _encoder_tokenizer, save_random

from tlm_probe.api.library import probe
from tlm_probe.errors import UserError
from tlm_probe.probe import engine

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def distilbert_mlm(tmp_path_factory) -> Path:
    """A tiny DistilBERT saved with its masked-LM head, as checkpoints on the hub are."""
    make_config, _ = FAMILY_MODELS["distilbert"]
    return save_random(make_config(), T.AutoModelForMaskedLM, _encoder_tokenizer,
                       tmp_path_factory.mktemp("m") / "distilbert", 0)


def test_refused_in_one_line_before_the_load(distilbert_mlm, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "80"}
    r = subprocess.run(
        [sys.executable, "cli.py", "probe", str(distilbert_mlm), "--data", "builtin:pydoc",
         "--backend", "transformer-lens", "--max-tokens", "100", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines()
             if not ln.startswith("importing torch and transformers")]
    assert len(lines) == 1, r.stderr  # besides the import phase a slow start announces (progress.py)
    assert lines[0].startswith("error: the TransformerLens backend cannot probe this distilbert model")
    assert "--backend native" in lines[0] and "--backend transformer-lens" in lines[0]
    assert not (tmp_path / "out" / "results.csv").exists()


def test_the_api_refuses_before_loading(distilbert_mlm, monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(engine, "load_probe_model", no_load)
    with pytest.raises(UserError, match="use --backend native"):
        probe(str(distilbert_mlm), CORPUS, backend="transformer-lens", max_tokens=50)
