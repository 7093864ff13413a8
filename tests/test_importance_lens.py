"""Logit lens: the last layer reproduces the model (KL 0, agreement 1, CE = the model's own loss)."""

import pytest
import torch

from tlm_probe.importance.logit_lens import LogitLens
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM


def test_tlm_last_layer_lens_is_the_model():
    torch.manual_seed(0)
    model = TaperedLM(
        TLMConfig(vocab_size=53, d_model=32, n_layers=3, n_heads=4, d_ff=(64, 64, 32), max_seq_len=16)
    ).eval()
    x = torch.randint(0, 53, (2, 9), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(x)
    logits = model(x)
    lens = LogitLens(3, model.ln_final, model.unembed)
    mask = torch.ones_like(x, dtype=torch.bool)
    for l in range(3):
        lens.update(l, cache[f"blocks.{l}.hook_resid_post"], logits, x, mask)
    rows = lens.rows()
    assert rows["logit_lens_kl"][2]["value"] == pytest.approx(0.0, abs=1e-6)
    assert rows["logit_lens_top1"][2]["value"] == 1.0
    loss = model(x, return_type="loss")
    assert rows["logit_lens_ce"][2]["value"] == pytest.approx(loss.item(), abs=1e-5)
    assert rows["logit_lens_kl"][0]["value"] > 1e-4
    p = torch.softmax(logits, -1)
    ent = -(p * p.log()).sum(-1).mean()
    assert rows["logit_lens_entropy"][2]["value"] == pytest.approx(ent.item(), abs=1e-5)
    assert rows["logit_lens_ce"][1]["n_tokens"] == 2 * 8


def test_gpt2_lens_uses_ln_f_and_matches_hf_loss():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=67, n_positions=32, n_embd=32, n_layer=2, n_head=4)).eval()
    x = torch.randint(0, 67, (2, 10), generator=torch.Generator().manual_seed(1))
    resid = []
    hooks = [
        b.register_forward_hook(lambda m, a, o: resid.append(o[0] if isinstance(o, tuple) else o))
        for b in model.transformer.h
    ]
    with torch.no_grad():
        out = model(x, labels=x)
    for h in hooks:
        h.remove()
    lens = LogitLens(2, model.transformer.ln_f, model.lm_head)
    mask = torch.ones_like(x, dtype=torch.bool)
    for l in range(2):
        lens.update(l, resid[l], out.logits, x, mask)
    rows = lens.rows()
    assert rows["logit_lens_kl"][1]["value"] == pytest.approx(0.0, abs=1e-6)
    assert rows["logit_lens_ce"][1]["value"] == pytest.approx(out.loss.item(), abs=1e-5)


def test_every_layer_against_float64_with_reused_buffers():
    """Layers and batches of different shapes share the lens's scratch buffers; each value still equals a
    float64 recomputation from scratch."""
    torch.manual_seed(3)
    V, d = 41, 8
    head, norm = torch.nn.Linear(d, V, bias=False), torch.nn.LayerNorm(d)
    lens = LogitLens(2, norm, head)
    want = {name: [[], []] for name in ("kl", "ce", "entropy", "top1")}
    for B, T in [(2, 7), (3, 5)]:
        final = torch.randn(B, T, V) * 2
        ids = torch.randint(0, V, (B, T))
        mask = torch.ones(B, T, dtype=torch.bool)
        fin = lens.final(final)
        logq = torch.log_softmax(final.double(), -1)
        for layer in range(2):
            resid = torch.randn(B, T, d)
            lens.update(layer, resid, fin, ids, mask)
            with torch.no_grad():
                logp = torch.log_softmax(head(norm(resid)).double(), -1)
            want["kl"][layer] += (logq.exp() * (logq - logp)).sum(-1).flatten().tolist()
            want["entropy"][layer] += (-(logp.exp() * logp).sum(-1)).flatten().tolist()
            want["top1"][layer] += (logp.argmax(-1) == logq.argmax(-1)).double().flatten().tolist()
            want["ce"][layer] += (-logp[:, :-1].gather(-1, ids[:, 1:, None])).flatten().tolist()
    rows = lens.rows()
    for name, per_layer in want.items():
        for layer in range(2):
            got = rows[f"logit_lens_{name}"][layer]
            assert got["n_tokens"] == len(per_layer[layer])
            assert got["value"] == pytest.approx(sum(per_layer[layer]) / len(per_layer[layer]), abs=1e-5)
