"""Capture layer: adapters, closed-form alignments, guardrails, hooks that change nothing, padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from models_zoo import CORPUS, build_model
from torch import nn

from tlm_probe.api.library import probe
from tlm_probe.capture import ADAPTERS, adapter_for, load_probe_model
from tlm_probe.capture.guardrails import GuardrailError, NonFiniteError, capture_set
from tlm_probe.capture.native import NativeBackend
from tlm_probe.capture.sink import StatSink
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.stats.alignment import PER_TOKEN, build_accumulators
from tlm_probe.stats.pieces import TokenIndex

TEXTS = CORPUS * 2


class Scale(nn.Module):
    """An 'MLP' whose output is c times its input."""

    def __init__(self, c: float):
        super().__init__()
        self.c = c

    def forward(self, x):
        return self.c * x


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    return {f: build_model(f, root / f) for f in ("gpt2", "llama", "bert", "gpt_neox")}


def _tlm(tmp_path, d_ff=(96, 64, 32)):
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=256, d_model=32, n_layers=3, n_heads=4, d_ff=d_ff, max_seq_len=64)
    return save_tlm(TaperedLM(cfg), tmp_path / "tlm")


def _ids(n=300, vocab=256, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, n).astype(np.uint32)


def test_every_adapter_row_taps_what_its_block_kinds_need():
    for a in ADAPTERS.values():
        for kind, taps in a.taps.items():
            assert capture_set(kind, set().union(*(s[0] for s in PER_TOKEN.values()))) <= set(taps), a.family


def test_unknown_architecture_lists_families_and_how_to_add():
    with pytest.raises(UserError, match="unsupported architecture 'rwkv'.*gpt2.*add an Adapter row"):
        adapter_for("rwkv")


@pytest.mark.parametrize("c", [2.0, -0.5])
def test_closed_form_mlp_multiple_of_its_input_gives_alignment_sign(tmp_path, c):
    pm = load_probe_model(_tlm(tmp_path))
    for blk in pm.model.blocks:  # mlp_out = c * resid_mid exactly
        blk.ln2, blk.mlp = nn.Identity(), Scale(c)
    df = probe(pm, _ids(), seq_len=32, max_tokens=None).set_index(["statistic", "layer"]).value
    for l in range(3):
        assert df["align_mlp_mid", l] == pytest.approx(np.sign(c), abs=1e-6)  # float32 products
        assert df["norm_ratio_mlp", l] == pytest.approx(abs(c), rel=1e-6)
        assert df["mlp_influence", l] == pytest.approx(0.0, abs=1e-6)  # resid_post = (1 + c) resid_mid


def test_closed_form_on_hf_gpt2(zoo):
    pm = load_probe_model(zoo["gpt2"])
    for blk in pm.model.transformer.h:
        blk.ln_2, blk.mlp = nn.Identity(), Scale(-3.0)
    df = probe(pm, TEXTS, seq_len=16, max_tokens=None, stats="align_mlp_mid")
    assert np.allclose(df.value, -1.0, atol=1e-6)


def test_tapered_widths_are_recorded_per_layer(tmp_path):
    df = probe(str(_tlm(tmp_path)), _ids(), seq_len=32, stats="align_mlp_mid")
    assert df.sort_values("layer").d_ff.tolist() == [96, 64, 32]
    assert df.sort_values("layer").depth.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_hooks_leave_logits_unchanged(zoo, family):
    pm = load_probe_model(zoo[family])
    ids = torch.randint(5, 300, (2, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        plain = pm.forward(ids, mask)
        sink = StatSink(pm, build_accumulators("all", pm.n_layers, pm.d_ff))
        sink.start_batch(TokenIndex(mask))
        hooked = NativeBackend(sink).run(ids, mask, full_output=True)
        sink.end_batch()
    key = "logits" if pm.is_causal else "last_hidden_state"
    assert torch.equal(plain[key], hooked[key])


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "gpt_neox"])
def test_padded_batch_equals_sequences_one_by_one(zoo, family):
    pm = load_probe_model(zoo[family])
    batched = probe(pm, TEXTS, seq_len=20, batch_size=4, max_tokens=None)
    single = probe(pm, TEXTS, seq_len=20, batch_size=1, max_tokens=None)
    assert (batched.n_tokens == single.n_tokens).all()
    assert np.allclose(batched.value, single.value, atol=1e-5, rtol=0)


def test_tokenizerless_checkpoint_probes_from_token_ids(tmp_path):
    folder = _tlm(tmp_path)
    np.save(tmp_path / "ids.npy", _ids(500))
    df = probe(str(folder), str(tmp_path / "ids.npy"), seq_len=32, max_tokens=None)
    assert (df.n_tokens == 500).all()
    with pytest.raises(UserError, match="has no tokenizer"):
        probe(str(folder), TEXTS, seq_len=32)
    np.save(tmp_path / "big.npy", np.array([1, 2, 256], dtype=np.uint32))
    with pytest.raises(UserError, match="token id 256 .* vocabulary of 256"):
        probe(str(folder), str(tmp_path / "big.npy"), seq_len=32)


def test_exclude_bos_drops_position_zero(zoo):
    pm = load_probe_model(zoo["gpt2"])
    a = probe(pm, TEXTS, seq_len=16, max_tokens=None, stats="align_mlp_mid")
    b = probe(pm, TEXTS, seq_len=16, max_tokens=None, stats="align_mlp_mid", exclude_bos=True)
    n_seq = a.n_tokens.iloc[0] - b.n_tokens.iloc[0]
    assert n_seq > 0 and not np.allclose(a.value, b.value)


def test_wrong_tap_fails_loudly(zoo):
    pm = load_probe_model(zoo["gpt2"])
    # point resid_mid at the LayerNorm output instead of its input: the pieces no longer add up
    bad = {**pm.adapter.taps["sequential"], "resid_mid": "ln_2:out"}
    object.__setattr__(pm, "adapter", _with_taps(pm.adapter, {"sequential": bad}))
    with pytest.raises(GuardrailError, match="layer 0: captured resid_mid is not resid_pre \\+ attn_out"):
        probe(pm, TEXTS, seq_len=16, max_tokens=64)


def test_hook_that_never_fires_is_reported(zoo):
    pm = load_probe_model(zoo["gpt2"])
    bad = {**pm.adapter.taps["sequential"], "mlp_out": "mlp.dropout:out"}  # GPT2MLP's dropout is skipped
    for blk in pm.model.transformer.h:
        blk.mlp.forward = lambda x, m=blk.mlp: m.c_proj(m.act(m.c_fc(x)))  # never calls .dropout
    object.__setattr__(pm, "adapter", _with_taps(pm.adapter, {"sequential": bad}))
    with pytest.raises(GuardrailError, match="never fired: mlp_out"):
        probe(pm, TEXTS, seq_len=16, max_tokens=64)


def test_non_finite_activations_name_the_layer(tmp_path):
    pm = load_probe_model(_tlm(tmp_path))
    with torch.no_grad():
        pm.model.blocks[1].mlp.W_out.weight[0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="layer 1 in mlp_out"):
        probe(pm, _ids(), seq_len=32)


def _with_taps(adapter, taps):
    from dataclasses import replace

    return replace(adapter, taps=taps)


def test_non_finite_caught_after_the_first_batch_too(tmp_path):
    pm = load_probe_model(_tlm(tmp_path))
    sink = StatSink(pm, build_accumulators("alignment", pm.n_layers, pm.d_ff), check_batches=0)
    ids = torch.randint(0, 256, (2, 8))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        pm.model.blocks[2].attn.W_O.weight[0, 0] = float("nan")
        sink.start_batch(TokenIndex(mask))
        with pytest.raises(NonFiniteError, match="layer 2 in attn_out"):
            NativeBackend(sink).run(ids, mask)
            sink.end_batch()


@pytest.mark.parametrize("family", ["mistral", "qwen2", "gpt_neox_seq", "gptj", "opt", "roberta"])
def test_other_adapter_rows_pass_the_guardrails(tmp_path, family):
    # every tap fires and the pieces add up on the first batch, or the probe raises GuardrailError
    pm = load_probe_model(build_model(family, tmp_path / family))
    df = probe(pm, TEXTS, seq_len=16, batch_size=3, max_tokens=200)
    assert len(df) == len(PER_TOKEN) * pm.n_layers and df.value.notna().all() and (df.n_tokens == 200).all()
