"""`attn_entropy` (stats/attention.py) against an independent computation.

Hugging Face families: transformers' own `model(ids, output_attentions=True)` under eager attention, one
sequence at a time (no padding, no hooks), the entropy of every (head, query) row by hand in float64 with
numpy. The probe batches sequences of different lengths (right padding), so a padded key or query counted
by mistake moves the value far beyond the tolerance. Our model: the softmax formed by hand from the cached
queries and keys. The tiny models' query and key weights are scaled up first: random tiny models attend
almost uniformly (entropy ~ ln t at position t), which would hide a wrong head or key average.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from families_zoo import build_family
from models_zoo import CORPUS, build_model

from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model, wrap_model
from tlm_probe.capture.attention import implementation
from tlm_probe.data.sequences import token_sequences
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM

TEXTS = CORPUS * 3
SEQ_LEN = 24
EPS32 = float(np.finfo(np.float32).eps)
# Bound on |probe - reference| per layer. Both sides run the same float32 forward, on different batch shapes
# (padded batches of 4 against one unpadded sequence), so their weights differ by rounding: a relative
# error delta per weight moves a row's entropy by at most delta x sum_k p_k |1 + ln p_k| <= delta (1 + H),
# and H <= ln T_k <= ln SEQ_LEN. delta: the scores are float32 dot products over d_head (8) terms of
# activations that went through <= 3 float32 layers of width <= 96; FACTOR 64 eps covers ~sqrt(96) x 3
# layers x the x16 sharpened scores' exponent (softmax turns an absolute score error into a relative
# weight error). The probe's own terms add one float32 rounding each (<= eps32 x H). Measured on the six
# families: at most 0.04 eps32 (the same kernels on both sides round alike); the bound is ~270 eps32.
FACTOR = 64.0
TOL = FACTOR * EPS32 * (1 + np.log(SEQ_LEN))
SHARPEN = 16.0  # query and key weights x16: scores x256, entropies ~1-2 nats (uniform: ~2.3, one-hot: 0)
SHARPER = {"gemma2": 40.0}  # its scores are scaled by query_pre_attn_scalar**-0.5 = 1/16, not 1/sqrt(8)
QK_NAMES = ("q_proj", "k_proj", "c_attn", "query", "key", "q_lin", "k_lin")

# family -> how the tiny model is built (models_zoo or families_zoo), causal or not
FAMILIES = {
    "gpt2": (build_model, True),
    "llama": (build_model, True),
    "qwen2": (build_model, True),
    "bert": (build_model, False),
    "gemma2": (build_family, True),
    "distilbert": (build_family, False),
}


def _sharpened(family: str, folder):
    """Build the tiny model, scale its query/key weights by SHARPEN, save it again; returns its auto class."""
    from transformers import AutoModel, AutoModelForCausalLM

    build, causal = FAMILIES[family]
    build(family, folder)
    auto = AutoModelForCausalLM if causal else AutoModel
    model = auto.from_pretrained(folder)
    with torch.no_grad():
        for name, w in model.named_parameters():
            if w.ndim == 2 and any(f".{k}." in f".{name}" for k in QK_NAMES):
                w.mul_(SHARPER.get(family, SHARPEN))
    model.save_pretrained(folder)
    return auto


def _row_entropy(p: np.ndarray) -> np.ndarray:
    """(..., T_k) float64 probabilities -> (...,) -sum p ln p, with 0 ln 0 = 0."""
    safe = np.where(p > 0, p, 1.0)
    return -(p * np.log(safe)).sum(-1)


def _reference(auto, folder, seqs, exclude_bos: bool) -> dict[int, np.ndarray]:
    """layer -> every counted query token's mean-over-heads entropy, one unpadded sequence at a time."""
    model = auto.from_pretrained(folder, attn_implementation="eager").eval()
    per_layer: dict[int, list] = {}
    with torch.no_grad():
        for s in seqs:
            out = model(torch.tensor([s]), output_attentions=True)
            for l, a in enumerate(out.attentions):  # (1, H, T, T)
                h = _row_entropy(a[0].double().numpy()).mean(0)  # (T,)
                per_layer.setdefault(l, []).append(h[int(exclude_bos) :])
    return {l: np.concatenate(v) for l, v in per_layer.items()}


def _uniform(seqs, causal: bool, exclude_bos: bool) -> float:
    """The mean entropy if every query attended uniformly to the keys it sees (ln of their number)."""
    seen = [np.arange(1, len(s) + 1) if causal else np.full(len(s), len(s)) for s in seqs]
    return float(np.log(np.concatenate([k[int(exclude_bos) :] for k in seen])).mean())


def _sharp(ref, uniform: float) -> None:
    """The test can see a wrong average: attention far from uniform, its entropy spread over tokens."""
    assert all(v.mean() < 0.9 * uniform and v.std() > 0.1 for v in ref.values()), (uniform, ref)


def _check(df, ref) -> None:
    rows = df[df.statistic == "attn_entropy"].sort_values("layer")
    assert list(rows.layer) == sorted(ref)
    for row in rows.itertuples():
        expect = ref[row.layer]
        assert row.n_tokens == expect.size
        assert abs(row.value - expect.mean()) <= TOL, (row.layer, row.value, expect.mean())
        assert row.std == pytest.approx(expect.std(ddof=1), abs=TOL)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_attn_entropy_matches_output_attentions(tmp_path, family):
    folder = tmp_path / family
    auto = _sharpened(family, folder)
    pm = load_probe_model(folder)
    seqs = list(token_sequences(TEXTS, SEQ_LEN, pm.tokenizer, pm.vocab_size))
    assert len({len(s) for s in seqs}) > 1  # sequences of different lengths: the probe's batches are padded
    ref = _reference(auto, folder, seqs, exclude_bos=True)
    _sharp(ref, _uniform(seqs, FAMILIES[family][1], exclude_bos=True))
    res = probe(str(folder), TEXTS, stats="attn_entropy", seq_len=SEQ_LEN, batch_size=4, max_tokens=None,
                exclude_bos=True, full=True)
    _check(res.table, ref)
    assert res.provenance["attention"]["implementation"] == "eager"


def test_handed_model_switches_to_eager_and_back(tmp_path):
    """A model handed to probe() loaded with sdpa runs eager for the statistic and is given back as it was;
    the alignment rows of the same call are those of a call without it (eager and sdpa differ by rounding)."""
    folder = tmp_path / "llama"
    auto = _sharpened("llama", folder)
    pm = load_probe_model(folder)
    was = implementation(pm.model)
    assert was != "eager"
    seqs = list(token_sequences(TEXTS, SEQ_LEN, pm.tokenizer, pm.vocab_size))
    kw = dict(seq_len=SEQ_LEN, batch_size=4, max_tokens=None, full=True)
    res = probe(pm, TEXTS, stats="attn_entropy,align_mlp_mid", **kw)
    assert implementation(pm.model) == was
    assert res.provenance["attention"] == {"implementation": "eager", "was": was,
                                           "why": res.provenance["attention"]["why"]}
    _check(res.table, _reference(auto, folder, seqs, exclude_bos=False))
    plain = probe(pm, TEXTS, stats="align_mlp_mid", **kw).table.sort_values("layer")
    mixed = res.table[res.table.statistic == "align_mlp_mid"].sort_values("layer")
    assert np.allclose(mixed.value, plain.value, rtol=0, atol=FACTOR * EPS32)


def _tiny_tlm(**kw) -> TaperedLM:
    base = dict(vocab_size=97, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=(96, 64, 32),
                max_seq_len=32, positions="learned", norm="layernorm")
    torch.manual_seed(0)
    model = TaperedLM(TLMConfig(**{**base, **kw})).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.W_Q.weight.mul_(SHARPEN)
            block.attn.W_K.weight.mul_(SHARPEN)
    return model


def test_attn_entropy_of_our_model_matches_a_hand_softmax():
    """Our blocks.{l}.attn.hook_pattern against softmax(q k^T / sqrt(d_head)) formed by hand in float64 from
    the cached queries and keys (learned positions: hook_q/hook_k are what the scores multiply)."""
    model = _tiny_tlm()
    ids = torch.randint(0, 97, (90,), generator=torch.Generator().manual_seed(1)).numpy()
    res = probe(wrap_model(model, name="tiny"), ids, stats="attn_entropy", seq_len=SEQ_LEN, batch_size=2,
                max_tokens=None, full=True)
    seqs = [ids[i : i + SEQ_LEN] for i in range(0, len(ids), SEQ_LEN)]  # the last one is short: padded
    assert len(seqs[-1]) < SEQ_LEN
    per_layer: dict[int, list] = {}
    with torch.no_grad():
        for s in seqs:
            keep = lambda n: n.endswith(("_q", "_k"))  # noqa: E731
            _, cache = model.run_with_cache(torch.tensor(s)[None], names_filter=keep)
            for l in range(len(model.blocks)):
                q = cache[f"blocks.{l}.attn.hook_q"][0].double().transpose(0, 1)  # (H, T, dh)
                k = cache[f"blocks.{l}.attn.hook_k"][0].double().transpose(0, 1)  # (H_kv, T, dh)
                k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
                T = q.shape[1]
                scores = (q @ k.transpose(-1, -2)) / np.sqrt(q.shape[-1])
                scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
                p = torch.softmax(scores, -1).numpy()
                per_layer.setdefault(l, []).append(_row_entropy(p).mean(0))
    ref = {l: np.concatenate(v) for l, v in per_layer.items()}
    _sharp(ref, _uniform(seqs, causal=True, exclude_bos=False))
    _check(res.table, ref)
    assert res.provenance["attention"]["implementation"] == "hooked pattern"


def test_no_attention_no_rows_said_once(tmp_path, capsys):
    """Mamba has no softmax attention: asked beside another statistic, no attn_entropy rows and one line
    saying so; asked alone, one refusal."""
    folder = build_family("mamba", tmp_path / "mamba")
    res = probe(str(folder), TEXTS, stats="attn_entropy,block_influence", seq_len=SEQ_LEN, max_tokens=200,
                full=True, progress=True)
    assert "attn_entropy" not in set(res.table.statistic) and "block_influence" in set(res.table.statistic)
    assert "attn_entropy" in res.provenance["refused"]
    said = [line for line in capsys.readouterr().err.splitlines() if "attn_entropy" in line]
    assert len(said) == 1 and "mamba" in said[0], said
    with pytest.raises(UserError, match="none of the asked statistics"):
        probe(str(folder), TEXTS, stats="attn_entropy", seq_len=SEQ_LEN, max_tokens=200)


def test_a_wrong_pattern_tap_or_a_kernel_without_weights_is_one_clear_line(tmp_path, monkeypatch):
    """The guardrails: a row whose pattern tap is not the attention weights is refused at the first batch;
    so is a run whose attention kernel returned none (sdpa, had the probe not switched to eager)."""
    import contextlib
    import dataclasses

    from tlm_probe.capture.guardrails import GuardrailError
    from tlm_probe.probe import engine

    folder = build_model("gpt2", tmp_path / "gpt2")
    pm = load_probe_model(folder)
    row = dataclasses.replace(pm.adapter, pattern="mlp.c_fc:out")  # the MLP's hidden layer, not the weights
    wrong = wrap_model(pm.model, pm.tokenizer, "gpt2", adapter=row)
    with pytest.raises(GuardrailError, match="pattern tap gives a tensor of shape"):
        probe(wrong, TEXTS, stats="attn_entropy", seq_len=SEQ_LEN, max_tokens=100)
    monkeypatch.setattr(engine, "eager_attention", lambda pm: contextlib.nullcontext({}))
    with pytest.raises(GuardrailError, match="returned no weights under attn_implementation='sdpa'"):
        probe(load_probe_model(folder), TEXTS, stats="attn_entropy", seq_len=SEQ_LEN, max_tokens=100)


def _every_variant() -> list[str]:
    from families_zoo import FAMILY_MODELS
    from models_zoo import FAMILIES as ZOO

    return [*ZOO, *FAMILY_MODELS]


NO_ATTENTION = {"mamba": "maps no softmax attention", "gpt_oss": "sink logit"}


@pytest.mark.parametrize("variant", _every_variant())
def test_every_family_row_maps_its_attention(tmp_path, variant):
    """Every row's pattern tap passes the guardrail (softmax rows over the unmasked keys, (B, H, T, T)) on a
    padded batch, and each layer's value lies in [0, mean ln(keys a query sees)] (uniform attention is the
    most entropy a row can have); the rows without one say why."""
    from families_zoo import FAMILY_MODELS

    build = build_family if variant in FAMILY_MODELS else build_model
    folder = build(variant, tmp_path / variant)
    kw = dict(stats="attn_entropy,block_influence", seq_len=16, batch_size=3, max_tokens=None, full=True)
    res = probe(str(folder), TEXTS, **kw)
    rows = res.table[res.table.statistic == "attn_entropy"]
    if variant in NO_ATTENTION:
        assert rows.empty and NO_ATTENTION[variant] in res.provenance["refused"]["attn_entropy"]
        return
    pm = load_probe_model(folder)
    seqs = list(token_sequences(TEXTS, 16, pm.tokenizer, pm.vocab_size))
    bound = _uniform(seqs, pm.is_causal, exclude_bos=False)
    assert len(rows) == pm.n_layers and rows.value.between(0, bound + TOL).all(), (rows.value, bound)
