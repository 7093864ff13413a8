"""The probe reads the tokenizer a tlm run folder was trained with (byte-level or a trained BPE)."""

import numpy as np
import pandas as pd
import pytest

from tlm_probe.api.library import probe
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer, train_bpe

DOC = " ".join(["The residual stream carries information between layers; later MLPs may reinforce it."] * 4)


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_text_probe_equals_probe_of_the_same_ids(tmp_path, kind):
    tok = ByteTokenizer() if kind == "byte" else train_bpe([DOC] * 20, vocab_size=300)
    cfg = TLMConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32),
                    max_seq_len=64)
    folder = save_tlm(TaperedLM(cfg), tmp_path / "run")
    tok.save(folder)
    from_text = probe(folder, [DOC], seq_len=32, max_tokens=None, batch_size=4)
    ids = tok.encode(DOC)
    from_ids = probe(folder, ids, seq_len=32, max_tokens=None, batch_size=4)
    assert int(from_text["n_tokens"].iloc[0]) == len(ids)
    pd.testing.assert_series_equal(from_text["value"], from_ids["value"], rtol=1e-9)
    assert np.isfinite(from_text["value"]).all()
