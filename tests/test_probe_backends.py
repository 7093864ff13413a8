"""native, transformer-lens and nnsight backends feed the same statistics and must agree to 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from models_zoo import CORPUS, build_model

from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

TEXTS = CORPUS * 2
BACKENDS = ("native", "transformer-lens", "nnsight")


def _all(folder, data, **kw):
    # a fresh load per backend: the TransformerLens bridge switches the model to eager attention
    return {
        b: probe(load_probe_model(folder), data, backend=b, max_tokens=None, batch_size=3, **kw)
        for b in BACKENDS
    }


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox", "bert"])
def test_backends_agree_on_hf_models(tmp_path, family):
    folder = build_model(family, tmp_path / family)
    out = _all(folder, TEXTS, seq_len=16)
    ref = out["native"]
    for b in BACKENDS[1:]:
        assert (out[b].n_tokens == ref.n_tokens).all()
        assert np.allclose(out[b].value, ref.value, atol=1e-5, rtol=0), b
        assert np.allclose(out[b].ci_high, ref.ci_high, atol=1e-5, rtol=0), b


def test_backends_agree_on_our_tapered_model(tmp_path):
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=128, d_model=32, n_layers=3, n_heads=4, d_ff=(96, 64, 32), max_seq_len=32)
    folder = save_tlm(TaperedLM(cfg), tmp_path / "tlm")
    ids = np.random.default_rng(0).integers(0, 128, 150).astype(np.uint32)
    out = _all(folder, ids, seq_len=32)
    for b in BACKENDS[1:]:
        assert np.allclose(out[b].value, out["native"].value, atol=1e-5, rtol=0), b


def test_transformer_lens_refuses_what_the_bridge_cannot_wrap(tmp_path, monkeypatch):
    import transformer_lens.model_bridge.sources as sources

    folder = build_model("roberta", tmp_path / "roberta")  # wrapped since issue 9 (RobertaForMaskedLM)
    ref = probe(str(folder), TEXTS, seq_len=16, max_tokens=50)
    tl = probe(str(folder), TEXTS, backend="transformer-lens", seq_len=16, max_tokens=50)
    assert np.allclose(tl.value, ref.value, atol=1e-5)

    def refuse(*args, **kwargs):
        raise ValueError("Could not determine supported architecture from config.\nmore lines")

    monkeypatch.setattr(sources, "build_bridge_from_module", refuse)
    with pytest.raises(UserError, match="use --backend native"):
        probe(str(folder), TEXTS, backend="transformer-lens", seq_len=16, max_tokens=50)
