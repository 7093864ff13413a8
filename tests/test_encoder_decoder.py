"""Encoder-decoder models. T5's encoder stack has a row of its own (one depth axis, loaded as
T5EncoderModel), checked here against test_families' independent float64 reference (each block re-run
with its MLP zeroed); the decoder stack is its own model (MODEL:decoder, tests/test_t5_decoder_stack.py);
the other encoder-decoder types are refused with the reason
(capture/families/refused.py: one depth axis per result table, one input sequence) before any heavy import,
on every path: the folder check, the loader with discovery on, and the CLI.

Tolerance 1e-5, as test_families (float32 pieces through 2 blocks of width 32; measured below 1e-7)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers as T
from models_zoo import CORPUS, VOCAB, _encoder_tokenizer, _spread_weights
from test_families import SEQ_LEN, _reference_values
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.capture import adapters, load_probe_model
from tlm_probe.errors import UserError

REASON = "encoder-decoder model: two stacks"
T5_LAYOUT = ("sequential", {"mlp": "layer.1.DenseReluDense"})  # T5LayerFF: x + DenseReluDense(norm(x))


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t5") / "t5"
    torch.manual_seed(0)
    cfg = T.T5Config(
        vocab_size=VOCAB, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4, dropout_rate=0.0
    )
    model = T.T5ForConditionalGeneration(cfg).eval()
    _spread_weights(model)
    model.save_pretrained(folder)
    _encoder_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bart")
    (folder / "config.json").write_text(json.dumps({"model_type": "bart"}))
    return folder


def test_t5_encoder_stack_matches_the_reference(t5):
    pm = load_probe_model(t5)
    assert (pm.n_layers, pm.d_ff, pm.is_causal) == (2, (64, 64), False)
    model = T.T5EncoderModel.from_pretrained(t5, dtype=torch.float64).eval()
    ref: dict = {}
    _reference_values("t5", model, pm, model.encoder.block, ref, layout=T5_LAYOUT, texts=CORPUS)
    for backend in ("native", "nnsight"):
        df = probe(load_probe_model(t5), CORPUS, backend=backend, seq_len=SEQ_LEN, max_tokens=None)
        worst = 0.0
        for row in df.itertuples():
            expect = np.concatenate(ref[(row.layer, row.statistic)])
            assert row.n_tokens == expect.size
            worst = max(worst, abs(row.value - expect.mean()))
        print(f"t5 encoder stack {backend}: max |probe - reference| {worst:.1e}")
        assert worst <= 1e-5, (backend, worst)
    with pytest.raises(UserError, match="not wired for T5's encoder stack"):
        probe(load_probe_model(t5), CORPUS, backend="transformer-lens", seq_len=SEQ_LEN, max_tokens=None)


def test_other_encoder_decoders_are_refused_with_the_reason_before_heavy_imports(bart):
    code = (
        "import sys\n"
        "from tlm_probe.capture.adapters import check_folder\n"
        "from tlm_probe.errors import UserError\n"
        f"try:\n    check_folder({str(bart)!r})\nexcept UserError as e:\n    print(e)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'nnsight') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"bart models are not supported: {REASON}") and out.strip().endswith("[]"), out


def test_an_encoder_decoder_is_not_discovered(bart, monkeypatch):
    monkeypatch.setattr(adapters, "DISCOVERY", {"enabled": True})
    with pytest.raises(UserError, match=REASON):
        load_probe_model(bart)


def test_the_cli_refuses_an_encoder_decoder_in_one_line(bart, tmp_path):
    data = tmp_path / "text.txt"
    data.write_text(CORPUS[0])
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["probe", str(bart), "--data", str(data), "--out", str(out), "--discover"])
    err = r.stderr.strip()
    assert r.exit_code == 1 and "\n" not in err and REASON in err and "Traceback" not in r.output, r.output
    assert not out.exists()
