import pytest
import torch
from nnsight import NNsight

from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import ConfigError, TLMConfig, config_with_schedule
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.tlm import TaperedLM

VARIANTS = [
    dict(mlp="swiglu", mixer="attention"),
    dict(mlp="gelu", mixer="attention", norm="layernorm", positions="learned", tie_embeddings=False),
    dict(mlp="swiglu", mixer="gated_attention", n_kv_heads=2),
    dict(mlp="gelu", mixer="gated_attention", norm="layernorm"),
]


def tiny(**kw) -> TLMConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=3, n_heads=4, d_ff=(96, 64, 32), max_seq_len=24)
    return TLMConfig(**{**base, **kw})


def tokens(B=2, T=12, V=97, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kw", VARIANTS)
def test_param_count_matches_accounting(kw):
    cfg = tiny(**kw)
    model = TaperedLM(cfg)
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total


def test_equal_widths_tapered_equals_uniform():
    uniform = config_with_schedule("uniform", 64, vocab_size=97, d_model=32, n_layers=3, n_heads=4)
    explicit = config_with_schedule("64,64,64", 64, vocab_size=97, d_model=32, n_layers=3, n_heads=4)
    assert uniform.schedule["name"] == "uniform" and explicit.schedule["name"] == "explicit"
    torch.manual_seed(0)
    a = TaperedLM(uniform)(tokens())
    torch.manual_seed(0)
    b = TaperedLM(explicit)(tokens())
    assert torch.equal(a, b)


@pytest.mark.parametrize("kw", VARIANTS)
def test_residual_identities(kw):
    cfg = tiny(**kw)
    model = TaperedLM(cfg).eval()
    _, cache = model.run_with_cache(tokens())
    for l in range(cfg.n_layers):
        keys = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
        c = {k: cache[f"blocks.{l}.hook_{k}"] for k in keys}
        torch.testing.assert_close(c["resid_mid"], c["resid_pre"] + c["attn_out"], rtol=0, atol=1e-6)
        torch.testing.assert_close(c["resid_post"], c["resid_mid"] + c["mlp_out"], rtol=0, atol=1e-6)
        assert cache[f"blocks.{l}.mlp.hook_pre"].shape[-1] == cfg.d_ff[l]
        if l + 1 < cfg.n_layers:
            assert torch.equal(c["resid_post"], cache[f"blocks.{l + 1}.hook_resid_pre"])


def test_nnsight_equals_transformer_lens_cache():
    model = TaperedLM(tiny(mixer="gated_attention")).eval()
    x = tokens()
    _, cache = model.run_with_cache(x)
    traced = NNsight(model)
    saved = {}
    with traced.trace(x):  # nnsight requires reading modules in forward order
        for l in range(3):
            blk = traced.blocks[l]
            saved[f"blocks.{l}.hook_resid_pre"] = blk.hook_resid_pre.output.save()
            saved[f"blocks.{l}.hook_attn_out"] = blk.hook_attn_out.output.save()
            saved[f"blocks.{l}.hook_resid_mid"] = blk.hook_resid_mid.output.save()
            saved[f"blocks.{l}.mlp.hook_pre"] = blk.mlp.hook_pre.output.save()
            saved[f"blocks.{l}.hook_mlp_out"] = blk.hook_mlp_out.output.save()
            saved[f"blocks.{l}.hook_resid_post"] = blk.hook_resid_post.output.save()
    for name, value in saved.items():
        assert torch.equal(value, cache[name]), name


@pytest.mark.parametrize("kw", VARIANTS)
def test_save_load_bit_identical(tmp_path, kw):
    cfg = config_with_schedule("cosine", 128, vocab_size=97, d_model=32, n_layers=3, n_heads=4, **kw)
    model = TaperedLM(cfg).eval()
    save_tlm(model, tmp_path / "ckpt")
    loaded = load_tlm(tmp_path / "ckpt")
    assert loaded.cfg == cfg and loaded.cfg.schedule == cfg.schedule
    x = tokens()
    assert torch.equal(model(x), loaded(x))
    if cfg.tie_embeddings:
        assert loaded.unembed.weight is loaded.embed.weight


def test_padding_left_equals_unpadded():
    model = TaperedLM(tiny()).eval()
    x = tokens(B=1, T=8)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), x], dim=1)
    mask = torch.cat([torch.zeros(1, 3), torch.ones(1, 8)], dim=1).long()
    torch.testing.assert_close(model(padded, attention_mask=mask)[:, 3:], model(x), atol=1e-5, rtol=1e-5)


def test_causality():
    model = TaperedLM(tiny()).eval()
    x = tokens(B=1, T=10)
    y = x.clone()
    y[0, 7] = (y[0, 7] + 1) % 97
    torch.testing.assert_close(model(x)[:, :7], model(y)[:, :7], atol=0, rtol=0)


def test_matches_transformers_llama():
    """An independent implementation: transformers' Llama with the same weights gives the same logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = tiny(n_kv_heads=2, d_ff=(64, 64, 64), tie_embeddings=False, norm_eps=1e-6)
    ours = TaperedLM(cfg).eval()
    hf_cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=24,
                         rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
    hf = LlamaForCausalLM(hf_cfg).eval()
    sd = {"model.embed_tokens.weight": ours.embed.weight, "model.norm.weight": ours.ln_final.norm.weight,
          "lm_head.weight": ours.unembed.weight}
    names = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
             "self_attn.o_proj": "attn.W_O", "mlp.gate_proj": "mlp.W_gate", "mlp.up_proj": "mlp.W_in",
             "mlp.down_proj": "mlp.W_out", "input_layernorm": "ln1", "post_attention_layernorm": "ln2"}
    for l, block in enumerate(ours.blocks):
        for hf_name, our_name in names.items():
            sd[f"model.layers.{l}.{hf_name}.weight"] = block.get_submodule(our_name).weight
    hf.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=True)
    x = tokens()
    torch.testing.assert_close(ours(x), hf(x).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kw,match", [
    (dict(mlp="relu"), "mlp"), (dict(d_model=30), "divisible"), (dict(d_ff=(64, 64)), "n_layers"),
    (dict(n_kv_heads=3), "n_kv_heads"),
])
def test_bad_configs(kw, match):
    with pytest.raises(ConfigError, match=match):
        tiny(**kw)


@pytest.mark.parametrize("tie", [True, False])
def test_auto_model_for_causal_lm_round_trip(tmp_path, tie):
    from transformers import AutoModelForCausalLM

    import tlm_probe

    tlm_probe.register_with_transformers()  # model_type "tlm" with the Auto classes (public API)

    cfg = config_with_schedule("cosine", 128, vocab_size=97, d_model=32, n_layers=3, n_heads=4,
                               tie_embeddings=tie, positions="learned" if tie else "rope")
    model = TaperedLM(cfg).eval()
    save_tlm(model, tmp_path / "a")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "a").eval()
    x = tokens()
    assert torch.equal(hf(x).logits, model(x))
    hf.save_pretrained(tmp_path / "b")  # widths travel in config.json
    again = load_tlm(tmp_path / "b")
    assert again.cfg.d_ff == cfg.d_ff and torch.equal(again(x), model(x))


@pytest.mark.parametrize("order", ["tlm_probe first", "transformers first"])
def test_auto_registration_in_a_fresh_interpreter(order):
    """register_with_transformers() works whichever is imported first; importing tlm_probe alone neither
    imports transformers nor touches its loader (no import hook: issue 32)."""
    import subprocess
    import sys

    imports = ["import tlm_probe", "import transformers"]
    first = imports if order == "tlm_probe first" else imports[::-1]
    code = "; ".join([*first, "tlm_probe.register_with_transformers()", "from transformers import AutoConfig",
                      "print(type(AutoConfig.for_model('tlm')).__name__)"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "TLMHFConfig", out.stderr[-500:]


def test_import_tlm_probe_leaves_transformers_alone():
    import subprocess
    import sys

    code = ("import sys; n = len(sys.meta_path); import tlm_probe; "
            "print('transformers' in sys.modules, len(sys.meta_path) == n)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "True"], out.stderr[-500:]
