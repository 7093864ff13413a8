"""LayerNorm Scaling (cfg.norm_scaling = "lns"; Sun et al. 2025, "The Curse of Depth in LLMs", arXiv
2502.05795) as a control arm (issue 33 part 3): every pre-norm of block l (1-based) has its output times
1/sqrt(l); "none" is today's model, number for number."""

from __future__ import annotations

import json
import math
import types

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.layers import LayerNorm, RMSNorm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.train.config import TrainConfig

EPS32 = float(torch.finfo(torch.float32).eps)
MIXERS = {"attention": {}, "gated_attention": dict(n_kv_heads=2), "titans": dict(mem_persistent=2),
          "hope_attention": dict(cms_chunks=(4, 64))}


def tiny(mixer="attention", **kw) -> TLMConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=4, n_heads=4, d_ff=(64, 32, 0, 64), max_seq_len=24,
                mixer=mixer, **MIXERS[mixer])
    return TLMConfig(**{**base, **kw})


def built(cfg: TLMConfig, seed=0) -> TaperedLM:
    torch.manual_seed(seed)
    return TaperedLM(cfg)


def tokens(B=2, T=16, V=97, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ---- (a) "none" is the default and today's model ----------------------------------------------------------

def _todays_rmsnorm(self, x, *_):  # RMSNorm.forward before this option and hook_scale (commit 104d4f0)
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
    return x32.type_as(x) * self.weight


def _todays_layernorm(self, x, *_):  # nn.LayerNorm.forward, the module the model used before
    return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_none_is_the_default_and_todays_model(mixer, norm):
    assert TLMConfig().norm_scaling == "none" and TrainConfig(steps=1).norm_scaling == "none"
    cfg = tiny(mixer, norm=norm)
    model = built(cfg).eval()
    today = built(cfg).eval()  # the same weights, every norm running the code it ran before
    todays = {RMSNorm: _todays_rmsnorm, LayerNorm: _todays_layernorm}
    for m in today.modules():
        if type(m) in todays:
            m.forward = types.MethodType(todays[type(m)], m)
    x = tokens()
    with torch.no_grad():  # the same operations in the same order on this machine: equal, not close
        assert torch.equal(model(x), today(x))
        assert torch.equal(model.run_with_cache(x)[0], today(x))  # reading every hook changes nothing


# ---- (b) flatter variance growth with depth at initialisation --------------------------------------------

def test_lns_flattens_the_variance_growth_with_depth():
    """var(resid_post of layer 12) / var(resid_post of layer 1) at initialisation, over a random batch (d 64,
    12 layers, SwiGLU 256, 8 x 64 tokens). Measured (seeds 0, 1, 2): none 1.109, 1.100, 1.109; lns 1.014,
    1.014, 1.012: LNS cuts the growth over the first layer's by ~8x (attention writes ~1/sqrt(l), SwiGLU ~1/l
    of what it did)."""
    growth = {}
    for scaling in ("none", "lns"):
        cfg = TLMConfig(vocab_size=256, d_model=64, n_layers=12, n_heads=4, d_ff=(256,) * 12, max_seq_len=64,
                        norm_scaling=scaling)
        model = built(cfg).eval()
        x = tokens(B=8, T=64, V=256, seed=10)
        with torch.no_grad():
            _, cache = model.run_with_cache(x, names_filter=lambda n: n.endswith("hook_resid_post"))
        growth[scaling] = cache["resid_post", 11].var().item() / cache["resid_post", 0].var().item() - 1
    assert growth["none"] > 0.05  # the plain stack does grow (0.109 measured)
    assert 0 < growth["lns"] < 0.25 * growth["none"]  # 0.014 measured


# ---- (c) config.json, load_tlm, the HF wrapper and training ----------------------------------------------

def test_config_json_records_it_and_loaders_round_trip_it(tmp_path):
    from transformers import AutoModelForCausalLM

    from tlm_probe import register_with_transformers
    from tlm_probe.models.hf import TLMHFConfig

    model = built(tiny(norm_scaling="lns")).eval()
    save_tlm(model, tmp_path / "lns")
    assert json.loads((tmp_path / "lns" / "config.json").read_text())["norm_scaling"] == "lns"
    loaded = load_tlm(tmp_path / "lns")
    assert loaded.cfg == model.cfg and loaded.cfg.norm_scaling == "lns"
    x = tokens()
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert TLMHFConfig(**model.cfg.to_dict()).to_tlm() == model.cfg
    register_with_transformers()
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "lns").eval()
    assert hf.config.norm_scaling == "lns"
    hf.save_pretrained(tmp_path / "hf")
    assert load_tlm(tmp_path / "hf").cfg.norm_scaling == "lns"
    with torch.no_grad():
        assert torch.equal(hf(x).logits, model(x))
    # "none" (the default) is left out, so every earlier model's config.json is written as before
    save_tlm(built(tiny()), tmp_path / "none")
    assert "norm_scaling" not in json.loads((tmp_path / "none" / "config.json").read_text())
    assert load_tlm(tmp_path / "none").cfg.norm_scaling == "none"
    with pytest.raises(UserError, match="norm_scaling"):
        TLMConfig(norm_scaling="lnss")


def test_training_config_and_cli_flag(tmp_path):
    assert TrainConfig(steps=1, norm_scaling="lns").model_config(256).norm_scaling == "lns"
    assert TrainConfig(steps=1, preset="tlm-tiny", norm_scaling="lns").model_config(256).norm_scaling == "lns"
    with pytest.raises(UserError, match="norm_scaling"):
        TrainConfig(steps=1, norm_scaling="LNS")
    runner = CliRunner()
    for command in ("train", "compare"):
        assert "--norm-scaling" in runner.invoke(app, [command, "--help"], terminal_width=200).output
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"paragraph {i}: a tapered model reads {i * 7 % 13}" for i in range(200)))
    args = ["train", "--out", str(tmp_path / "t"), "--data", str(corpus), "--d-model", "32", "--layers", "2",
            "--heads", "2", "--d-ff", "64", "--multiple-of", "16", "--seq-len", "16", "--batch-size", "2",
            "--steps", "2", "--eval-tokens", "64", "--eval-interval", "2", "--warmup", "1", "--threads", "1",
            "--norm-scaling", "lns", "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "t" / "config.json").read_text())["norm_scaling"] == "lns"


# ---- (d) every mixer: the factor is applied, and every sublayer still carries signal ----------------------

def _pre_norms(block) -> list:
    """The pre-norms of a block: ln1, ln2, Titans' norm before its SWA, the CMS levels' own norms."""
    inner = [m for name, m in block.named_modules() if name.endswith(("norm_swa", ".norm"))
             and isinstance(m, (RMSNorm, LayerNorm))]
    return [block.ln1, block.ln2, *inner]


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_every_pre_norm_is_scaled_by_one_over_sqrt_l(mixer):
    plain, lns = built(tiny(mixer)).eval(), built(tiny(mixer, norm_scaling="lns")).eval()
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(3))
    for l, (a, b) in enumerate(zip(plain.blocks, lns.blocks, strict=True)):
        norms_a, norms_b = _pre_norms(a), _pre_norms(b)
        assert len(norms_b) == {"titans": 3, "hope_attention": 3}.get(mixer, 2)
        for na, nb in zip(norms_a, norms_b, strict=True):
            with torch.no_grad():
                want = na(x).double() / math.sqrt(l + 1)  # float64 factor, here
                got = nb(x).double()
            # one float32 product more: half an ulp of the result
            assert (got - want).abs().max().item() <= EPS32 * want.abs().max().item()
    with torch.no_grad():  # the final norm is not depth-scaled
        assert torch.equal(plain.ln_final(x), lns.ln_final(x))


def _sublayer_norms(model: TaperedLM, x: torch.Tensor) -> list[dict]:
    loss, cache = model.run_with_cache(x, return_type="loss")
    loss.backward()
    out = []
    for l, block in enumerate(model.blocks):
        grads = {part: [p.grad for p in getattr(block, part).parameters() if p.grad is not None]
                 for part in ("attn", "mlp")}
        out.append({"attn_out": cache["attn_out", l].norm().item(),
                    "mlp_out": cache["mlp_out", l].norm().item(),
                    **{f"grad_{k}": torch.stack([g.norm() for g in v]).norm().item() if v else 0.0
                       for k, v in grads.items()}})
    return out


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_every_sublayer_carries_signal_with_lns(mixer, one_thread):
    """DESIGN.md: a component that carries no signal is a bug. With the same weights, each sublayer's output
    and its parameters' gradient under lns are within [0.5/l, 2] of the plain model's: a sublayer's input
    shrinks by 1/sqrt(l), so a linear one writes ~1/sqrt(l), SwiGLU's product ~1/l, and Titans' memory
    (l2-normalised q/k, RMS-normed read-out) ~1 of what it did. Measured ratio x l: 0.97 to 4.0."""
    x = tokens()
    plain = _sublayer_norms(built(tiny(mixer)).train(), x)
    lns = _sublayer_norms(built(tiny(mixer, norm_scaling="lns")).train(), x)
    d_ff = tiny(mixer).d_ff
    for l, (a, b) in enumerate(zip(plain, lns, strict=True), start=1):
        for key in a:
            if key in ("mlp_out", "grad_mlp") and d_ff[l - 1] == 0:  # no MLP: exactly 0 in both
                assert a[key] == b[key] == 0.0
                continue
            assert math.isfinite(b[key]) and a[key] > 0
            assert 0.5 / l <= b[key] / a[key] <= 2.0, (l, key, b[key] / a[key])


# ---- (e) no parameters added ----------------------------------------------------------------------------

@pytest.mark.parametrize("mixer", list(MIXERS))
def test_lns_adds_no_parameters(mixer):
    plain, lns = built(tiny(mixer)), built(tiny(mixer, norm_scaling="lns"))
    n = sum(p.numel() for p in plain.parameters())
    assert sum(p.numel() for p in lns.parameters()) == n
    assert count_params(lns.cfg).total == count_params(plain.cfg).total == n
    sa, sb = plain.state_dict(), lns.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)  # same names, same init


def test_an_lns_model_is_not_exported_as_a_plain_llama():
    """Export would silently drop the 1/sqrt(l) factors: refused in one line."""
    from tlm_probe.errors import UserError
    from tlm_probe.export.support import check_exportable
    from tlm_probe.models.config import TLMConfig

    cfg = TLMConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=(64, 64), norm_scaling="lns")
    with pytest.raises(UserError, match="depth-scaled"):
        check_exportable(cfg, "gguf")
