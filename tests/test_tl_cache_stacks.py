"""run_with_cache on our own models returns TransformerLens's ActivationCache (issue 22): TL's shorthand keys,
accumulated_resid, decompose_resid and the logit-lens final norm, each checked against plain torch forward
hooks on the modules (the reference never goes through HookPoints or the cache)."""

import pytest
import torch
from transformer_lens import ActivationCache

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM

EPS32 = 1.2e-7
VARIANTS = [
    dict(mlp="swiglu", mixer="attention"),
    dict(mlp="gelu", mixer="attention", norm="layernorm", positions="learned", tie_embeddings=False),
    dict(mlp="swiglu", mixer="gated_attention", n_kv_heads=2),
]


def tiny(**kw) -> TLMConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=3, n_heads=4, d_ff=(96, 64, 0), max_seq_len=24)
    return TLMConfig(**{**base, **kw})


def tokens(B=2, T=12, V=97, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def reference(model, x, **kw):
    """Outputs of the embeddings, each block and its two sublayers, by torch forward hooks, recorded in the
    same forward as run_with_cache."""
    got, handles = {}, []

    def keep(key):
        return lambda mod, args, out: got.__setitem__(key, out.detach().clone())

    handles.append(model.embed.register_forward_hook(keep("embed")))
    if model.pos_embed is not None:
        handles.append(model.pos_embed.register_forward_hook(keep("pos_embed")))
    for l, block in enumerate(model.blocks):
        handles.append(block.register_forward_hook(keep(("block", l))))
        handles.append(block.attn.register_forward_hook(keep(("attn", l))))
        handles.append(block.mlp.register_forward_hook(keep(("mlp", l))))
    try:
        with torch.no_grad():
            logits, cache = model.run_with_cache(x, **kw)
    finally:
        for h in handles:
            h.remove()
    return got, logits, cache


@pytest.mark.parametrize("kw", VARIANTS)
def test_activation_cache_shorthand_and_stacks(kw):
    torch.manual_seed(0)
    cfg = tiny(**kw)
    model = TaperedLM(cfg).eval()
    x = tokens()
    ref, logits, cache = reference(model, x)
    assert isinstance(cache, ActivationCache)
    L = cfg.n_layers
    embedded = ref["embed"] + ref.get("pos_embed", 0)
    # the stream after block l is what block l returned: compared exactly (the same tensor, copied)
    for l in range(L):
        assert torch.equal(cache["resid_post", l], ref[("block", l)])
        assert torch.equal(cache["attn_out", l], ref[("attn", l)])
        assert torch.equal(cache["mlp_out", l], ref[("mlp", l)])
    assert torch.equal(cache["resid_post", -1], ref[("block", L - 1)])
    assert torch.equal(cache["blocks.1.hook_resid_pre"], ref[("block", 0)])  # our full names still work
    assert torch.equal(cache["embed"], ref["embed"])

    acc, labels = cache.accumulated_resid(return_labels=True)
    assert labels == [f"{l}_pre" for l in range(L)] + ["final_post"]
    want = torch.stack([embedded] + [ref[("block", l)] for l in range(L)])
    assert torch.equal(acc, want)

    # logit lens: the final entry, through the real final norm and unembedding, gives the model's logits;
    # both sides run the same float32 ops on the same input, so only kernel-order rounding (eps x scale x 8)
    lens = cache.accumulated_resid(apply_ln=True)[-1]
    assert torch.allclose(model.unembed(lens), logits, rtol=0, atol=8 * EPS32 * logits.abs().max().item())

    parts, names = cache.decompose_resid(return_labels=True)
    embeds = ["embed", "pos_embed"] if cfg.positions == "learned" else ["embed"]
    assert names == embeds + [f"{l}_{s}_out" for l in range(L) for s in ("attn", "mlp")]
    # the components sum to the final stream: 2L + 2 float32 additions of terms no larger than the
    # stream's running magnitude, each rounding by at most eps x that magnitude (factor 2 for slack)
    total = parts.double().sum(0)
    scale = max(p.abs().max().item() for p in parts) + ref[("block", L - 1)].abs().max().item()
    bound = 2 * (2 * L + 2) * EPS32 * scale
    assert (total - ref[("block", L - 1)].double()).abs().max().item() <= bound


def test_remove_batch_dim_cache():
    torch.manual_seed(0)
    model = TaperedLM(tiny()).eval()
    x = tokens(B=1)
    ref, _, cache = reference(model, x, remove_batch_dim=True)
    assert not cache.has_batch_dim
    assert torch.equal(cache["resid_post", 2], ref[("block", 2)][0])
    assert cache.accumulated_resid().shape == (4, 12, 32)
