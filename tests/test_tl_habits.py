"""TransformerLens habits on our models (issue 35 item 5): cache["attn_scores", l], cache["scale", l, "ln1"]
and ln_final.hook_scale, model.to_tokens / to_string / tokenizer, W_U and W_E, each checked against a
second, independent computation (float64 from other cached tensors, UTF-8 bytes, the run's own tokenizer)."""

from __future__ import annotations

import pytest
import torch

from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.hf_tokenizer import byte_fast_tokenizer
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer, load_saved_tokenizer, train_bpe

EPS32 = float(torch.finfo(torch.float32).eps)
VARIANTS = [
    dict(positions="learned"),
    dict(positions="learned", norm="layernorm"),
    dict(mixer="gated_attention", n_kv_heads=2, positions="learned"),
    dict(mixer="hope_attention", cms_chunks=(4, 64)),
]


def tiny(**kw) -> TLMConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=2, n_heads=4, d_ff=(64, 64), max_seq_len=24)
    return TLMConfig(**{**base, **kw})


def model_of(seed=0, **kw) -> TaperedLM:
    torch.manual_seed(seed)
    model = TaperedLM(tiny(**kw)).eval()
    with torch.no_grad():  # norm weights/biases start at 1/0: spread them so the weight's place matters
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def tokens(B=2, T=12, V=97, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def heads(t: torch.Tensor, H: int) -> torch.Tensor:
    """(B, T, H_kv, dh) cached q/k/v -> (B, H, T, dh) float64, kv heads repeated for grouped queries."""
    return t.double().repeat_interleave(H // t.shape[2], dim=2).transpose(1, 2)


# ---- attention scores ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", VARIANTS)
def test_attn_scores_are_scaled_masked_logits_of_the_pattern(kw):
    model = model_of(**kw)
    x = tokens()
    with torch.no_grad():
        plain = model(x)
        logits, cache = model.run_with_cache(x)
    assert torch.equal(logits, plain)  # reading scores and scales leaves SDPA's and the norms' numbers
    T = x.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l, block in enumerate(model.blocks):
        H, dh = block.attn.n_heads, block.attn.d_head
        s = cache["attn_scores", l]
        assert s.shape == (2, H, T, T)
        assert torch.isneginf(s[..., ~causal]).all() and torch.isfinite(s[..., causal]).all()
        # the cached pattern is the softmax of the cached scores (float32 softmax over <= T terms)
        p = cache["pattern", l].double()
        assert (s.double().softmax(-1) - p).abs().max().item() <= 4 * T * EPS32
        if kw.get("positions") != "learned":
            continue
        # no rotary: scores = q k^T / sqrt(dh) from hook_q / hook_k in float64; a float32 dot product of dh
        # terms errs by at most dh eps sum|q_i k_i| (elementwise bound), factor 2
        q, k = heads(cache["q", l], H), heads(cache["k", l], H)
        want = (q @ k.transpose(-1, -2)) / dh**0.5
        bound = 2 * dh * EPS32 * (q.abs() @ k.abs().transpose(-1, -2)) / dh**0.5
        assert ((s.double() - want).abs() <= bound)[..., causal].all()


def test_scores_alone_formed_only_while_hooked():
    model = model_of()
    attn = model.blocks[0].attn
    calls = []
    orig = attn._pattern
    attn._pattern = lambda *a, **k: calls.append(1) or orig(*a, **k)
    x = tokens()
    with torch.no_grad():
        plain = model(x)
        assert not calls
        seen = []
        out = model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_attn_scores",
                                                  lambda s, hook: seen.append(s.shape))])
    assert calls and seen == [(2, 4, 12, 12)]
    assert torch.equal(out, plain)  # a hook that reads the scores keeps SDPA's output


@pytest.mark.parametrize("in_place", [True, False])
def test_edited_scores_drive_the_output(in_place):
    """An ALiBi-like bias added to the scores of layer 0, as TransformerLens applies an edit of
    hook_attn_scores (pattern = softmax(edited scores), z = pattern @ V): z compared with that computed
    in float64 from the same run's hook_q/k/v (learned positions: no rotary between them and the scores)."""
    model = model_of(positions="learned", mixer="gated_attention", n_kv_heads=2)
    x = tokens()
    T, H, dh = x.shape[1], 4, model.cfg.d_head
    dist = (torch.arange(T)[:, None] - torch.arange(T)[None]).float()  # (T, S) query - key
    slope = torch.tensor([0.0, 0.5, 1.0, 2.0])[:, None, None]  # (H, 1, 1)

    def bias(scores, hook):
        if in_place:
            scores.sub_(slope * dist)  # -inf - finite stays -inf
            return None
        return scores - slope * dist

    cache = {}
    def keep(t, hook):
        cache[hook.name] = t.detach().clone()

    names = [f"blocks.0.attn.hook_{n}" for n in ("q", "k", "v", "gate", "z")]
    with torch.no_grad():
        plain = model(x)
        edited = model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_attn_scores", bias),
                                                    *[(n, keep) for n in names]])
    q, k, v = (heads(cache[f"blocks.0.attn.hook_{n}"], H) for n in "qkv")
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-1, -2)) / dh**0.5 - slope.double() * dist.double()
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    want = (pattern @ v).transpose(1, 2) * cache["blocks.0.attn.hook_gate"].double()  # (B, T, H, dh)
    got = cache["blocks.0.attn.hook_z"].double()
    # float32 scores (dh-term dot products, |s| up to smax + 2T) and a T-term mix of |v|max: eps-scale bounds
    smax = scores[..., causal].abs().max().item()
    assert (got - want).abs().max().item() <= 8 * (dh + T) * EPS32 * max(smax, 1.0) * v.abs().max().item()
    assert (edited - plain).abs().max().item() > 1e-4  # the edit reached the logits


def test_self_only_scores_give_z_equal_v():
    """Every key but the query's own masked (-inf): each softmax row is exactly one 1, so z = V."""
    model = model_of()
    T = 12
    eye = torch.eye(T, dtype=torch.bool)
    got = {}
    hooks = [("blocks.1.attn.hook_attn_scores", lambda s, hook: s.masked_fill(~eye, float("-inf"))),
             ("blocks.1.attn.hook_v", lambda t, hook: got.__setitem__("v", t.clone())),
             ("blocks.1.attn.hook_z", lambda t, hook: got.__setitem__("z", t.clone()))]
    with torch.no_grad():
        model.run_with_hooks(tokens(), fwd_hooks=hooks)
    assert (got["z"] - got["v"]).abs().max().item() <= EPS32 * got["v"].abs().max().item()


# ---- norm scales --------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_hook_scale_is_transformer_lens_denominator(norm):
    """TransformerLens's hook_scale (its RMSNorm/LayerNorm and NormalizationBridge): the per-token
    denominator sqrt(mean(x^2) + eps), x centred for LayerNorm, so that normalised = x / scale."""
    model = model_of(norm=norm)
    x = tokens()
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    eps = model.cfg.norm_eps
    L = model.cfg.n_layers
    inputs = {**{("ln1", l): cache["resid_pre", l] for l in range(L)},
              **{("ln2", l): cache["resid_mid", l] for l in range(L)}}
    for (name, l), stream in inputs.items():
        s = stream.double()
        if norm == "layernorm":
            s = s - s.mean(-1, keepdim=True)
        want = (s.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        got = cache["scale", l, name]
        assert got.shape == (2, 12, 1)
        assert ((got.double() - want).abs() / want).max().item() <= 4 * model.cfg.d_model * EPS32
    # the habit it serves: cache.apply_ln_to_stack on the last stream, times the final norm's weight (and
    # bias), is the final norm's output
    final = model.ln_final.norm
    stack = cache.apply_ln_to_stack(cache["resid_post", L - 1][None], layer=L)[0]
    want = stack.double() * final.weight.double() + (final.bias.double() if norm == "layernorm" else 0.0)
    got = cache["ln_final.hook_normalized"].double()
    assert (got - want).abs().max().item() <= 8 * model.cfg.d_model * EPS32 * want.abs().max().item()
    assert cache.accumulated_resid(apply_ln=True).shape == (L + 1, 2, 12, model.cfg.d_model)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_edited_scale_drives_the_norm(norm):
    """Doubling ln_final's scale halves the normalised stream: logits = unembed((x - mean?) / (2 scale) w
    + b), computed here in float64 from resid_post."""
    model = model_of(norm=norm)
    x = tokens()
    with torch.no_grad():
        plain, cache = model.run_with_cache(x)
        edited = model.run_with_hooks(x, fwd_hooks=[("ln_final.hook_scale", lambda s, hook: 2 * s)])
    final = model.ln_final.norm
    s = cache["resid_post", model.cfg.n_layers - 1].double()
    if norm == "layernorm":
        s = s - s.mean(-1, keepdim=True)
    normed = s / (2 * cache["ln_final.hook_scale"].double()) * final.weight.double()
    if norm == "layernorm":
        normed = normed + final.bias.double()
    want = normed @ model.W_U.double()
    bound = 8 * model.cfg.d_model * EPS32 * (normed.abs() @ model.W_U.double().abs()).max().item()
    assert (edited.double() - want).abs().max().item() <= bound
    assert (edited - plain).abs().max().item() > 1e-3


# ---- tokenizer, to_tokens, to_string, W_U, W_E ----------------------------------------------------------

TEXT = "héllo, wörld\n"


def test_byte_run_to_tokens_is_its_utf8_bytes(tmp_path):
    model = model_of(vocab_size=256)
    save_tlm(model, tmp_path)
    ByteTokenizer().save(tmp_path)
    loaded = load_tlm(tmp_path)
    ids = loaded.to_tokens(TEXT)
    assert ids.dtype == torch.long and ids.shape == (1, len(TEXT.encode()))
    assert ids[0].tolist() == list(TEXT.encode("utf-8"))  # no BOS: the byte tokenizer has none
    assert loaded.to_string(ids[0]) == TEXT and loaded.to_string(ids) == [TEXT]
    assert loaded.tokenizer.decode(ids[0]) == TEXT
    # an earlier byte run (only tlm_tokenizer.json): the same ids through the registered byte tokenizer
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (tmp_path / name).unlink(missing_ok=True)
    assert torch.equal(load_tlm(tmp_path).to_tokens(TEXT), ids)


def test_bpe_run_to_tokens_matches_its_saved_tokenizer(tmp_path):
    tok = train_bpe(["the cat sat on the mat. " * 20, "a tokenizer of a run folder " * 20], vocab_size=300)
    model = model_of(vocab_size=tok.vocab_size)
    save_tlm(model, tmp_path)
    tok.save(tmp_path)
    loaded = load_tlm(tmp_path)
    text = "the cat sat on a run folder"
    want = load_saved_tokenizer(tmp_path).encode(text).tolist()
    assert loaded.to_tokens(text)[0].tolist() == want  # no BOS: a trained BPE has only an EOS
    assert loaded.to_string(torch.tensor(want)) == text


def test_bos_is_prepended_only_when_the_tokenizer_has_one():
    model = model_of(vocab_size=256)
    model.tokenizer = byte_fast_tokenizer()
    with pytest.raises(ValueError, match="no BOS"):
        model.to_tokens("hi", prepend_bos=True)
    model.tokenizer.bos_token = "\x02"
    assert model.to_tokens("hi")[0].tolist() == [2, ord("h"), ord("i")]
    assert model.to_tokens("hi", prepend_bos=False)[0].tolist() == [ord("h"), ord("i")]


def test_no_tokenizer_is_a_clear_error(tmp_path):
    model = model_of()
    save_tlm(model, tmp_path)
    loaded = load_tlm(tmp_path)  # a folder without tokenizer files
    assert loaded.tokenizer is None
    with pytest.raises(UserError, match="no tokenizer"):
        loaded.to_tokens("hi")
    with pytest.raises(UserError, match="no tokenizer"):
        loaded.to_string(torch.tensor([1, 2]))


@pytest.mark.parametrize("tie", [True, False])
def test_w_u_and_w_e_in_transformer_lens_orientation(tie):
    model = model_of(tie_embeddings=tie)
    x = tokens()
    with torch.no_grad():
        logits, cache = model.run_with_cache(x)
    d, V = model.cfg.d_model, model.cfg.vocab_size
    assert model.W_U.shape == (d, V) and model.W_E.shape == (V, d)
    assert torch.equal(cache["hook_embed"], model.W_E[x])  # a row lookup: exact
    final = cache["ln_final.hook_normalized"].double()
    want = final @ model.W_U.double()
    bound = 4 * d * EPS32 * (final.abs() @ model.W_U.double().abs()).max().item()
    assert (logits.double() - want).abs().max().item() <= bound
    assert (model.W_U.data_ptr() == model.W_E.data_ptr()) == tie
    with pytest.raises(AttributeError, match="W_pos"):  # rotary positions: no position embedding
        model.W_pos  # noqa: B018
    assert model_of(positions="learned").W_pos.shape == (24, d)


def test_hf_wrapper_has_the_same_habits(tmp_path):
    from transformers import AutoModelForCausalLM

    from tlm_probe import register_with_transformers

    register_with_transformers()
    model = model_of(vocab_size=256)
    save_tlm(model, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(hf.W_U, model.W_U) and torch.equal(hf.W_E, model.W_E)
    with pytest.raises(UserError, match="no tokenizer"):
        hf.to_tokens("hi")
    hf.tokenizer = byte_fast_tokenizer()
    ids = hf.to_tokens(TEXT)
    assert ids[0].tolist() == list(TEXT.encode()) and hf.to_string(ids[0]) == TEXT
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, model(ids))  # the same forward on the same modules
