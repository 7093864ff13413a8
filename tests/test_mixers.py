"""The four token mixers: Titans' chunk-parallel memory against its token-by-token reference, causality,
padding, overfitting, accounting on the meta device, checkpoints through AutoModelForCausalLM, and the
probe's decomposition guardrail on every backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from swap_check import same_loss_and_grads

import tlm_probe.models.titans as titans_module
from tlm_probe.models.accounting import count_params, train_flops_per_token
from tlm_probe.models.config import ConfigError, TLMConfig, config_with_schedule
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.memory import GRAD_CLIP, memory_chunked, memory_rates, memory_reference
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.presets import PRESETS, preset_config
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import parse_schedule

TITANS = dict(mixer="titans", window=6, mem_chunk=4, mem_persistent=2)
HOPE = dict(mixer="hope_attention", cms_chunks=(4, 64))  # one in-context level, one static (>= max_seq_len)
MIXER_KW = {"attention": {}, "gated_attention": {}, "titans": TITANS, "hope_attention": HOPE}


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny forwards lose from threads


def tiny(mixer: str, **kw) -> TLMConfig:
    base = dict(vocab_size=61, d_model=32, n_layers=3, n_heads=4, d_ff=(96, 64, 32), max_seq_len=40)
    return TLMConfig(**{**base, **MIXER_KW[mixer], **kw})


def tokens(B=2, T=20, V=61, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def _memory_inputs(N=3, T=21, dh=8, dm=16, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    q, k = F.normalize(r(N, T, dh), dim=-1), F.normalize(r(N, T, dh), dim=-1)
    W1, W2 = r(N, dm, dh) / dh**0.5, r(N, dh, dm) / dm**0.5
    return [t.requires_grad_() for t in (q, k, r(N, T, dh), r(N, T, 3), W1, W2)]


@pytest.mark.parametrize("chunk", [1, 3, 4, 8, 32])
def test_chunk_parallel_memory_equals_token_by_token_reference(chunk):
    """Forward and every input gradient (q, k, v, rate logits, initial weights) to 1e-5; the reference
    takes each token's inner gradient from autograd and updates per-token weights one token at a time."""
    inputs = _memory_inputs()
    valid = torch.ones(3, 21, dtype=torch.bool)
    valid[0, :5] = False  # a padded prefix: writes nothing
    probe = torch.linspace(-1.0, 1.0, 8)
    results = []
    for fn in (memory_chunked, memory_reference):
        q, k, v, logits, W1, W2 = inputs
        y = fn(q, k, v, *memory_rates(logits, valid, 0.1), W1, W2, chunk)
        results.append((y, torch.autograd.grad((y * probe).sum(), inputs)))
    (y, grads), (y_ref, grads_ref) = results
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=0)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=0)


def test_chunk_size_one_is_plain_online_gradient_descent():
    """With b = 1 both forms reduce to the textbook recurrence, written out here by hand for a 1-token
    memory step: S = η S − θ ∇ (∇ of ‖M(k) − v‖²/d_h, clipped to norm GRAD_CLIP), M = (1 − α) M + S,
    y = M(q)."""
    q, k, v, logits, W1, W2 = (t.detach() for t in _memory_inputs(N=1, T=2))
    keep, eta, theta = (x[0] for x in memory_rates(logits, None, 0.1))
    keep, eta = keep.exp(), eta.exp()
    W1a, W2a, S1, S2 = W1[0].clone(), W2[0].clone(), torch.zeros_like(W1[0]), torch.zeros_like(W2[0])
    for t in range(2):
        z = W1a @ k[0, t]
        h = F.silu(z)
        r = 2 * (W2a @ h - v[0, t]) / q.shape[-1]  # the loss is averaged over the head dimension
        g2 = torch.outer(r, h)
        g1 = torch.outer((W2a.T @ r) * torch.sigmoid(z) * (1 + z * (1 - torch.sigmoid(z))), k[0, t])
        clip = min(1.0, GRAD_CLIP / float(torch.cat([g1.flatten(), g2.flatten()]).norm()))
        g1, g2 = g1 * clip, g2 * clip
        S1, S2 = eta[t] * S1 - theta[t] * g1, eta[t] * S2 - theta[t] * g2
        W1a, W2a = keep[t] * W1a + S1, keep[t] * W2a + S2
        y = W2a @ F.silu(W1a @ q[0, t])
        torch.testing.assert_close(memory_chunked(q, k, v, *memory_rates(logits, None, 0.1), W1, W2, 1)[0, t],
                                   y, atol=1e-6, rtol=0)


def test_titans_model_equals_its_sequential_reference(monkeypatch):
    """The whole model, forward and parameter gradients, with the memory swapped for the reference."""
    torch.manual_seed(0)
    model = TaperedLM(tiny("titans", mem_chunk=3))
    x = tokens(T=14)
    same_loss_and_grads(model, x, monkeypatch, titans_module, "memory_chunked",
                            (memory_chunked, memory_reference))


@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_causality(mixer):
    model = TaperedLM(tiny(mixer)).eval()
    x = tokens(B=1, T=20)
    for t in (0, 7, 19):
        y = x.clone()
        y[0, t] = (y[0, t] + 1) % 61
        a, b = model(x), model(y)
        assert torch.equal(a[:, :t], b[:, :t]), (mixer, t)
        assert not torch.equal(a[:, t:], b[:, t:])


@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_left_padding_equals_unpadded(mixer):
    # Titans: a pad count that is a multiple of the chunk keeps the chunk boundaries, and no persistent
    # tokens (their momentum would be reset by the pads); documented in models/memory.py
    model = TaperedLM(tiny(mixer, mem_persistent=0)).eval()
    x = tokens(B=1, T=12)
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), x], dim=1)
    mask = torch.cat([torch.zeros(1, 4), torch.ones(1, 12)], dim=1).long()
    torch.testing.assert_close(model(padded, attention_mask=mask)[:, 4:], model(x), atol=1e-5, rtol=1e-5)


def test_sliding_window_sees_only_the_window():
    """Titans' attention: the stream at real position s reaches the attention at t only if t − s < window;
    the 2 persistent tokens (prepended, positions 0-1) are seen from every real position."""
    torch.manual_seed(0)
    layer = TaperedLM(tiny("titans")).blocks[0].attn.eval()
    positions = torch.arange(20)[None]
    z = torch.randn(1, 22, 32, requires_grad=True)
    out = layer.swa(z, torch.arange(22)[None], layer.attention_mask(positions, None))
    (grad,) = torch.autograd.grad(out[0, 2 + 15].sum(), z)
    reached = grad[0].abs().sum(-1) > 0
    assert reached.tolist() == [True, True] + [15 - s < 6 and s <= 15 for s in range(20)]


@pytest.mark.parametrize("mixer", tuple(MIXERS))
@pytest.mark.parametrize("schedule", ["uniform", "cosine:1.5:0.5"])
def test_each_mixer_overfits_a_tiny_batch(mixer, schedule):
    torch.manual_seed(0)
    # the optimizer here steps every level each step (the multi-frequency schedule is the trainer's)
    kw = {**MIXER_KW[mixer], "mem_chunk": 8}
    cfg = config_with_schedule(parse_schedule(schedule, 16), 64, vocab_size=61, d_model=32, n_layers=3,
                               n_heads=4, max_seq_len=16, **kw)
    model = TaperedLM(cfg)
    x = tokens(B=2, T=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(60):
        loss = model(x, return_type="loss")
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.5 and loss.item() < 0.3, (first, loss.item())


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_accounting_equals_numel_on_meta_for_every_preset_and_mixer(preset, mixer):
    counts = []
    for schedule in ("uniform", "cosine:1.5:0.5"):
        cfg = preset_config(preset, schedule, mixer)
        with torch.device("meta"):
            model = TaperedLM(cfg)
        assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
        counts.append((count_params(cfg).total, train_flops_per_token(cfg)))
    assert counts[0] == counts[1]  # tapered and uniform: identical parameters and FLOPs


def test_hope_splits_the_mlp_budget_over_its_levels():
    spec = parse_schedule("cosine:1.5:0.5", 16)
    att, hope = (config_with_schedule(spec, 128, vocab_size=61, d_model=32, n_layers=4, n_heads=4,
                                      **{"mixer": m, **MIXER_KW[m]}) for m in ("attention", "hope_attention"))
    # same MLP matrices; Hope adds one step size per in-context level per block (both levels: chunk < 256)
    assert [2 * w for w in hope.d_ff] == list(att.d_ff)
    assert count_params(att).mlp == count_params(hope).mlp - 2 * 4
    with pytest.raises(ConfigError, match="divisible"):
        config_with_schedule("uniform", 96, mixer="hope_attention", cms_chunks=(1, 2, 4, 8, 16))


@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_checkpoint_and_auto_model_round_trip(tmp_path, mixer):
    from transformers import AutoModelForCausalLM

    import tlm_probe

    tlm_probe.register_with_transformers()  # model_type "tlm" with the Auto classes (public API)

    cfg = config_with_schedule(parse_schedule("cosine", 16), 128, vocab_size=61, d_model=32, n_layers=3,
                               n_heads=4, max_seq_len=40, **MIXER_KW[mixer])
    model = TaperedLM(cfg).eval()
    save_tlm(model, tmp_path / "a")
    x = tokens()
    loaded = load_tlm(tmp_path / "a")
    assert loaded.cfg == cfg and torch.equal(loaded(x), model(x))
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "a").eval()
    assert torch.equal(hf(x).logits, model(x))
    hf.save_pretrained(tmp_path / "b")
    assert torch.equal(load_tlm(tmp_path / "b")(x), model(x))


@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_contract_hooks_and_extra_hook_points(mixer):
    cfg = tiny(mixer)
    model = TaperedLM(cfg).eval()
    _, cache = model.run_with_cache(tokens())
    for l in range(cfg.n_layers):
        c = {k: cache[f"blocks.{l}.hook_{k}"] for k in ("resid_pre", "attn_out", "resid_mid", "mlp_out")}
        torch.testing.assert_close(c["resid_mid"], c["resid_pre"] + c["attn_out"], rtol=0, atol=1e-6)
        assert cache[f"blocks.{l}.mlp.hook_pre"].shape[-1] == cfg.d_ff[l]
    extra = {"titans": ["attn.hook_mem_read", "attn.hook_mem_out", "attn.swa.hook_z"],
             "hope_attention": ["mlp.levels.0.hook_post", "mlp.hook_level_in"]}.get(mixer, [])
    for name in extra:
        assert f"blocks.0.{name}" in cache, name


@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_probe_guardrail_passes_on_every_backend(tmp_path, mixer):
    """The probe's decomposition guardrail (pieces add up, every tap fires) runs on each backend, and the
    backends agree on every statistic."""
    from tlm_probe.api.library import probe
    from tlm_probe.capture import load_probe_model
    from tlm_probe.capture.guardrails import GuardrailError

    torch.manual_seed(0)
    folder = save_tlm(TaperedLM(tiny(mixer, vocab_size=128)), tmp_path / mixer)
    ids = np.random.default_rng(0).integers(0, 128, 120).astype(np.uint32)
    out = {b: probe(load_probe_model(folder), ids, backend=b, seq_len=40, max_tokens=None, batch_size=3)
           for b in ("native", "transformer-lens", "nnsight")}
    for b in ("transformer-lens", "nnsight"):
        assert np.allclose(out[b].value, out["native"].value, atol=1e-5, rtol=0), b
    assert (out["native"]["statistic"] == "align_mlp_mid").any()
    # the guardrail is live on this model: a resid_mid that is not resid_pre + attn_out is caught
    pm = load_probe_model(folder)
    pm.model.blocks[1].hook_resid_mid.register_forward_hook(lambda m, i, o: o + 1e-3)
    with pytest.raises(GuardrailError, match="layer 1"):
        probe(pm, ids, seq_len=40, max_tokens=None, batch_size=3)
