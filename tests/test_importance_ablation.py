"""Ablation hooks against independent computations: weight surgery, a hand-written forward, a model
with the block removed, and a model whose layer is an identity by construction."""

import copy

import numpy as np
import pytest
import torch

from tlm_probe.importance.ablation import Ablation, Calibration, ablating, calibrating
from tlm_probe.importance.ablation_run import AblationEffects, token_nll
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM


def tiny_tlm(seed=0, **kw) -> TaperedLM:
    torch.manual_seed(seed)
    base = dict(vocab_size=61, d_model=32, n_layers=3, n_heads=4, d_ff=(96, 64, 32), max_seq_len=16)
    return TaperedLM(TLMConfig(**{**base, **kw})).eval()


def ids(B=3, T=10, V=61, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def manual_forward(model: TaperedLM, x_ids, drop_mlp=None, drop_block=None):
    """The TLM forward written out by hand, leaving out one MLP or one whole block."""
    x = model.embed(x_ids)
    positions = torch.arange(x_ids.shape[1]).expand_as(x_ids)
    for l, blk in enumerate(model.blocks):
        if l == drop_block:
            continue
        x = x + blk.attn(blk.ln1(x), positions, None)
        if l != drop_mlp:
            x = x + blk.mlp(blk.ln2(x))
    return model.unembed(model.ln_final(x))


@pytest.mark.parametrize("kind", ["mlp", "skip"])
@torch.no_grad()
def test_zero_mlp_and_block_skip_equal_manual_forward(kind):
    model, x = tiny_tlm(), ids()
    B = x.shape[0]
    abls = [
        Ablation("mlp_zero", l, model.blocks[l].mlp, "zero")
        if kind == "mlp"
        else Ablation("block_skip", l, model.blocks[l], "skip")
        for l in range(3)
    ]
    with ablating(abls, B):
        out = model(x.repeat(3, 1))  # three ablations in one pass
    for l in range(3):
        ref = manual_forward(model, x, **({"drop_mlp": l} if kind == "mlp" else {"drop_block": l}))
        torch.testing.assert_close(out[l * B : (l + 1) * B], ref, atol=1e-5, rtol=1e-5)
    # hooks are gone afterwards
    torch.testing.assert_close(model(x), manual_forward(model, x))


@torch.no_grad()
def test_block_skip_equals_model_without_block():
    model, x = tiny_tlm(seed=3), ids()
    pruned = copy.deepcopy(model)
    del pruned.blocks[1]
    with ablating([Ablation("block_skip", 1, model.blocks[1], "skip")], x.shape[0]):
        out = model(x)
    torch.testing.assert_close(out, pruned(x), atol=1e-5, rtol=1e-5)


def tiny_gpt2(tmp_path=None):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=67, n_positions=32, n_embd=32, n_layer=3, n_head=4, n_inner=64)
    return GPT2LMHeadModel(cfg).eval()


@torch.no_grad()
def test_gpt2_mlp_zero_equals_weight_surgery_and_attn_tuple_output():
    model, x = tiny_gpt2(), ids(V=67)
    surgery = copy.deepcopy(model)
    surgery.transformer.h[1].mlp.c_proj.weight.zero_()
    surgery.transformer.h[1].mlp.c_proj.bias.zero_()
    with ablating([Ablation("mlp_zero", 1, model.transformer.h[1].mlp, "zero")], x.shape[0]):
        out = model(x).logits
    torch.testing.assert_close(out, surgery(x).logits, atol=1e-5, rtol=1e-5)
    # attention modules return tuples: only the hidden state is replaced
    surgery = copy.deepcopy(model)
    surgery.transformer.h[2].attn.c_proj.weight.zero_()
    surgery.transformer.h[2].attn.c_proj.bias.zero_()
    with ablating([Ablation("attn_zero", 2, model.transformer.h[2].attn, "zero")], x.shape[0]):
        out = model(x).logits
    torch.testing.assert_close(out, surgery(x).logits, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_mean_ablation_writes_the_calibration_mean():
    model, x = tiny_tlm(), ids()
    mlp = model.blocks[0].mlp
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[:, :2] = False
    calib, seen = Calibration(pool_size=7, seed=0), []
    handle = mlp.register_forward_hook(lambda m, a, o: seen.append(o.clone()))
    with calibrating([mlp], calib, {"mask": mask}):
        model(x)
    handle.remove()
    expected = seen[0][mask].double().mean(0).float()
    torch.testing.assert_close(calib.mean(mlp), expected)
    assert calib.pools[id(mlp)][1].shape == (7, 32)
    # every pooled vector is one of the real (masked-in) outputs
    real = seen[0][mask]
    for v in calib.pools[id(mlp)][1]:
        assert torch.isclose(real, v, atol=1e-6).all(-1).any()
    surgery = copy.deepcopy(model)
    surgery.blocks[0].mlp.W_out.weight.zero_()
    got = []
    h = model.blocks[0].hook_resid_post.register_forward_hook(lambda m, a, o: got.append(o))
    with ablating([Ablation("mlp_mean", 0, mlp, "mean")], x.shape[0], calib):
        model(x)
    h.remove()
    resid_mid = model.embed(x) + model.blocks[0].attn(
        model.blocks[0].ln1(model.embed(x)), torch.arange(10).expand_as(x), None
    )
    torch.testing.assert_close(got[0], resid_mid + expected, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_identity_layer_has_zero_dnll_and_is_least_important():
    model, x = tiny_tlm(seed=5), ids(B=4, T=12)
    model.blocks[1].mlp.W_out.weight.zero_()  # layer 1's MLP is an identity on the residual stream
    for blk in model.blocks:  # larger weights so that the other MLPs matter measurably
        for p in blk.mlp.parameters():
            if p.abs().sum() > 0:
                p.mul_(20)
    mask = torch.ones_like(x, dtype=torch.bool)
    mlps = [b.mlp for b in model.blocks]
    calib = Calibration(pool_size=64, seed=0)
    with calibrating(mlps, calib, {"mask": mask}):
        model(x)
    abls = [Ablation(f"mlp_{k}", l, m, k) for l, m in enumerate(mlps) for k in ("zero", "mean", "resample")]
    eff = AblationEffects(lambda b: model(b["input_ids"]), abls, n_layers=3, calib=calib, max_rows=8)
    eff.update({"input_ids": x}, mask)
    rows = eff.rows()
    for kind in ("zero", "mean", "resample"):
        vals = np.array([r["value"] for r in rows[f"ablation_dnll_mlp_{kind}"]])
        assert vals[1] == pytest.approx(0.0, abs=1e-6)
        assert np.abs(vals).argmin() == 1 and np.abs(vals[[0, 2]]).min() > 1e-4
    # the dNLL of zero-ablating layer 0 equals the loss of the hand-written forward without it
    ref = token_nll(manual_forward(model, x, drop_mlp=0), x) - token_nll(model(x), x)
    assert rows["ablation_dnll_mlp_zero"][0]["value"] == pytest.approx(ref.double().mean().item(), abs=1e-5)
    assert rows["ablation_dnll_mlp_zero"][0]["n_tokens"] == 4 * 11


@torch.no_grad()
def test_grouped_passes_equal_one_ablation_per_pass():
    model, x = tiny_tlm(seed=2), ids()
    mask = torch.ones_like(x, dtype=torch.bool)
    abls = [Ablation("mlp_zero", l, model.blocks[l].mlp, "zero") for l in range(3)]
    abls += [Ablation("block_skip", l, model.blocks[l], "skip") for l in range(3)]
    results = []
    for rows in (3, 100):  # one ablation per pass vs all six in one pass
        eff = AblationEffects(lambda b: model(b["input_ids"]), abls, n_layers=3, max_rows=rows)
        eff.update({"input_ids": x}, mask)
        results.append(eff.rows())
    for name in results[0]:
        np.testing.assert_allclose(
            [r["value"] for r in results[0][name]], [r["value"] for r in results[1][name]], atol=1e-6
        )
