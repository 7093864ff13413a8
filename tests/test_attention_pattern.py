"""blocks.{l}.attn.hook_pattern (TransformerLens's name and layout, (B, H, T_q, T_k)): computed only when a
hook is on it; its rows are probabilities, causal, and pattern @ V is the attention output before W_O."""

import pytest
import torch

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM

EPS32 = 1.2e-7
VARIANTS = [
    dict(mixer="attention"),
    dict(mixer="attention", positions="learned", norm="layernorm"),
    dict(mixer="gated_attention", n_kv_heads=2),
]


def tiny(**kw) -> TLMConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=2, n_heads=4, d_ff=(64, 64), max_seq_len=24)
    return TLMConfig(**{**base, **kw})


def tokens(B=2, T=12, V=97, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def patterns(model, x, **kw):
    with torch.no_grad():
        logits, cache = model.run_with_cache(x, **kw)
    return logits, cache


@pytest.mark.parametrize("kw", VARIANTS)
def test_pattern_rows_causal_and_value_mix(kw):
    torch.manual_seed(0)
    cfg = tiny(**kw)
    model = TaperedLM(cfg).eval()
    x = tokens()
    with torch.no_grad():
        plain = model(x)  # no hook on the pattern: the SDPA path
    logits, cache = patterns(model, x)
    B, T = x.shape
    for l, block in enumerate(model.blocks):
        H = block.attn.n_heads  # the module's own head count (per-layer heads may differ from cfg.n_heads)
        p = cache["pattern", l]
        assert p.shape == (B, H, T, T)
        # each row: a float32 softmax over <= T terms, normalised by one division (T eps, factor 4)
        assert (p.double().sum(-1) - 1).abs().max().item() <= 4 * T * EPS32
        assert (p >= 0).all()
        assert torch.equal(p.triu(1), torch.zeros_like(p))  # masked scores are -inf: exp gives exactly 0
        v = cache[f"blocks.{l}.attn.hook_v"].double()  # (B, T, H_kv, dh)
        v = v.repeat_interleave(H // v.shape[2], dim=2).transpose(1, 2)  # (B, H, T, dh)
        z = cache[f"blocks.{l}.attn.hook_z"].double().transpose(1, 2)  # before W_O (and after the gate)
        if block.attn.W_G is not None:
            z = z / cache[f"blocks.{l}.attn.hook_gate"].double().transpose(1, 2)
        mixed = p.double() @ v
        # z was one float32 product of T terms: T eps x |v|max (probabilities sum to 1), factor 4
        assert (mixed - z).abs().max().item() <= 4 * T * EPS32 * v.abs().max().item()
    # a hook that only reads the pattern leaves SDPA's output: the cached run is the plain forward
    assert torch.equal(logits, plain)


def test_pattern_is_softmax_of_scaled_scores_float64():
    """Learned positions (no rotary): the pattern from hook_q/hook_k in float64, with the causal and padding
    masks built here, as the independent second path."""
    torch.manual_seed(1)
    cfg = tiny(positions="learned")
    model = TaperedLM(cfg).eval()
    x = tokens()
    am = torch.ones_like(x)
    am[1, :3] = 0  # left padding in the second row
    _, cache = patterns(model, x, attention_mask=am)
    T = x.shape[1]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()[None] & am.bool()[:, None, :]
    allowed = allowed | torch.eye(T, dtype=torch.bool)[None]  # a pad query sees itself (tlm.py)
    for l in range(cfg.n_layers):
        q = cache[f"blocks.{l}.attn.hook_q"].double().transpose(1, 2)
        k = cache[f"blocks.{l}.attn.hook_k"].double().transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / cfg.d_head**0.5
        want = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
        got = cache["pattern", l].double()
        # float32 scores of |s| <= smax carry eps x smax x d_head error; softmax passes it on ~ linearly
        smax = scores.abs().max().item()
        assert (got - want).abs().max().item() <= 4 * cfg.d_head * EPS32 * max(smax, 1.0)
        assert torch.equal(got[1, :, 3:, :3], torch.zeros_like(got[1, :, 3:, :3]))  # pads never attended


def test_pattern_not_computed_unless_hooked():
    model = TaperedLM(tiny()).eval()
    seen = []
    model.blocks[0].attn.hook_pattern.register_forward_hook(lambda m, a, o: seen.append(o.shape))
    with torch.no_grad():
        model(tokens())
    assert seen == [(2, 4, 12, 12)]
    fired = []
    attn1 = model.blocks[1].attn
    orig = attn1._pattern
    attn1._pattern = lambda *a, **k: fired.append(1) or orig(*a, **k)
    with torch.no_grad():
        model(tokens())
    assert not fired  # layer 1 has no hook: its SDPA path ran


@pytest.mark.parametrize("in_place", [True, False])
def test_patched_pattern_drives_the_output(in_place):
    """Replacing the pattern by the causal mean (each query averages V over its prefix) gives z = that
    average of hook_v, computed here in float64 from V alone."""
    torch.manual_seed(2)
    model = TaperedLM(tiny()).eval()
    x = tokens()
    T = x.shape[1]
    uniform = torch.ones(T, T).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)

    def patch(pattern, hook):
        if in_place:
            pattern[:] = uniform
            return None
        return uniform.expand_as(pattern).clone()

    cache = {}
    keep = lambda act, hook: cache.__setitem__(hook.name, act.detach().clone())  # noqa: E731
    with torch.no_grad():
        model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_pattern", patch),
                                           ("blocks.0.attn.hook_v", keep), ("blocks.0.attn.hook_z", keep)])
    v = cache["blocks.0.attn.hook_v"].double()  # (B, T, H, dh)
    want = v.cumsum(1) / torch.arange(1, T + 1, dtype=torch.float64)[None, :, None, None]
    got = cache["blocks.0.attn.hook_z"].double()
    # a float32 product of <= T terms against float64 prefix means: T eps x |v|max, factor 4
    assert (got - want).abs().max().item() <= 4 * T * EPS32 * v.abs().max().item()
