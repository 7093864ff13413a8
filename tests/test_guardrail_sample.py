"""The first batch checks additivity on a sample of tokens; finiteness is still checked on every token."""

import re
from dataclasses import replace

import pytest
import torch

from tlm_probe.capture.guardrails import GuardrailError, NonFiniteError, sample_counted
from tlm_probe.capture.loading import wrap_model
from tlm_probe.capture.native import NativeBackend
from tlm_probe.capture.sink import StatSink
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.stats.alignment import build_accumulators
from tlm_probe.stats.pieces import TokenIndex


def test_sample_is_counted_tokens_with_every_first_token():
    mask = torch.zeros(6, 100, dtype=torch.long)
    for i, n in enumerate([100, 3, 57, 1, 0, 99]):
        mask[i, :n] = 1
    counted = TokenIndex(mask, exclude_bos=True).counted
    s = sample_counted(counted, k=32)
    assert not (s & ~counted).any() and 32 <= int(s.sum()) <= 32 + 6
    for row in range(6):
        if counted[row].any():
            assert s[row, int(counted[row].int().argmax())]
    assert torch.equal(sample_counted(counted, k=10_000), counted)


def _pm():
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=2, d_ff=(64, 64, 64), max_seq_len=64)
    return wrap_model(TaperedLM(cfg))


def _run(pm, ids):
    sink = StatSink(pm, build_accumulators("alignment", pm.n_layers, pm.d_ff))
    mask = torch.ones_like(ids)
    sink.start_batch(TokenIndex(mask))
    with torch.inference_mode():
        NativeBackend(sink).run(ids, mask)
    sink.end_batch()


def test_wrong_tap_still_fails_on_a_batch_larger_than_the_sample():
    pm = _pm()
    taps = pm.adapter.taps
    bad = {**taps["sequential"], "resid_mid": taps["sequential"]["resid_pre"]}
    object.__setattr__(pm, "adapter", replace(pm.adapter, taps={**taps, "sequential": bad}))
    with pytest.raises(GuardrailError, match="layer 0: captured resid_mid"):
        _run(pm, torch.randint(0, 64, (16, 64)))  # 1024 tokens, 256 checked


def test_inf_at_an_unsampled_token_of_the_first_batch_is_caught():
    pm = _pm()
    ids = torch.randint(0, 64, (16, 64))
    unsampled = (~sample_counted(torch.ones(16, 64, dtype=torch.bool))).nonzero()[0].tolist()

    def poison(module, args, out):
        out = out.clone()
        out[unsampled[0], unsampled[1], 0] = float("inf")
        return out

    pm.mlp(1).register_forward_hook(poison)
    with pytest.raises(NonFiniteError, match="layer 1"):
        _run(pm, ids)


def _sequential_pieces(g: torch.Generator, B=3, T=7, d=5, dtype=torch.float32) -> dict[str, torch.Tensor]:
    pre, attn, mlp = (torch.randn(B, T, d, generator=g, dtype=dtype) for _ in range(3))
    mid = pre + attn
    return {"resid_pre": pre, "attn_out": attn, "resid_mid": mid, "mlp_out": mlp, "resid_post": mid + mlp}


@pytest.mark.parametrize("piece, row", [("resid_mid", "resid_mid is not resid_pre + attn_out"),
                                        ("resid_post", "resid_post is not resid_mid + mlp_out")])
def test_every_additivity_row_is_checked_and_named_with_its_count(piece, row):
    """check_layer's matrix of +1/-1 rows against the sums written out by hand: a piece off by far more
    than rounding at two values fails its own row, with those two values counted."""
    from tlm_probe.capture.adapters import SEQUENTIAL
    from tlm_probe.capture.guardrails import check_layer

    raw = _sequential_pieces(torch.Generator().manual_seed(0))
    counted = torch.ones(3, 7, dtype=torch.bool)
    check_layer(SEQUENTIAL, 4, raw, counted, {})  # exact sums pass
    raw[piece] = raw[piece].clone()
    raw[piece][1, 2, :2] += 1e-3  # ~1e4 units in the last place of values of order 1
    with pytest.raises(GuardrailError, match=f"layer 4: captured {re.escape(row)} .* on 2 values"):
        check_layer(SEQUENTIAL, 4, raw, counted, {})


def test_rounding_within_the_bound_passes_and_pieces_of_two_widths_are_one_error():
    from tlm_probe.capture.adapters import SEQUENTIAL
    from tlm_probe.capture.guardrails import check_layer

    raw = _sequential_pieces(torch.Generator().manual_seed(1))
    counted = torch.ones(3, 7, dtype=torch.bool)
    eps = torch.finfo(torch.float32).eps
    raw["resid_post"] = raw["resid_post"] * (1 + 2 * eps)  # a few units in the last place: rounding
    check_layer(SEQUENTIAL, 0, raw, counted, {})
    raw["mlp_out"] = torch.randn(3, 7, 9)  # a tap at a module of another width
    with pytest.raises(GuardrailError, match="layer 0: resid_post != resid_mid \\+ mlp_out"):
        check_layer(SEQUENTIAL, 0, raw, counted, {"mlp_out": "x:out"})


@pytest.mark.parametrize("budget", [1, 10**9])  # a check per layer, or every layer at once
def test_layers_checked_together_name_the_first_layer_at_fault(budget):
    """AdditivityChecks gathers layers (the sink's first batch) and checks them at once: the first layer
    at fault is the one named, with its own row and count, whatever the grouping; good layers pass."""
    from tlm_probe.capture.adapters import SEQUENTIAL
    from tlm_probe.capture.guardrails import AdditivityChecks, picker

    g = torch.Generator().manual_seed(2)
    layers = [_sequential_pieces(g) for _ in range(5)]
    pick = picker(torch.ones(3, 7, dtype=torch.bool))
    checks = AdditivityChecks(SEQUENTIAL, {}, budget=budget)
    for i, raw in enumerate(layers):
        checks.add(i, raw, pick)
    checks.check()  # exact sums pass
    layers[3]["resid_post"] = layers[3]["resid_post"] + 1e-3  # every value of layer 3's second row
    layers[4]["resid_mid"] = layers[4]["resid_mid"] + 1e-3
    row = "resid_post is not resid_mid \\+ mlp_out"
    with pytest.raises(GuardrailError, match=f"layer 3: captured {row} .* on 105 values"):
        for i, raw in enumerate(layers):
            checks.add(i, raw, pick)
        checks.check()


def test_a_float64_layer_after_float32_ones_is_held_to_its_own_bound():
    """Layers of another dtype are checked apart, each against units in the last place of its own dtype:
    an error of 1e-9 is rounding in float32 and a fault in float64."""
    from tlm_probe.capture.adapters import SEQUENTIAL
    from tlm_probe.capture.guardrails import AdditivityChecks, picker

    g = torch.Generator().manual_seed(3)
    f32, f64 = _sequential_pieces(g), _sequential_pieces(g, dtype=torch.float64)
    for raw in (f32, f64):
        raw["resid_post"] = raw["resid_post"] + 1e-9
    checks = AdditivityChecks(SEQUENTIAL, {})
    pick = picker(torch.ones(3, 7, dtype=torch.bool))
    checks.add(0, f32, pick)
    checks.add(1, f64, pick)
    with pytest.raises(GuardrailError, match="layer 1: captured resid_post"):
        checks.check()


def test_inf_in_a_sampled_sum_is_named_non_finite_not_a_wrong_adapter():
    from tlm_probe.capture.adapters import SEQUENTIAL
    from tlm_probe.capture.guardrails import check_layer

    raw = _sequential_pieces(torch.Generator().manual_seed(4))
    raw["resid_post"][0, 0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="layer 2 in resid_post"):
        check_layer(SEQUENTIAL, 2, raw, torch.ones(3, 7, dtype=torch.bool), {})


def test_the_sample_of_a_full_batch_is_found_once_and_is_the_masks():
    from tlm_probe.capture.sink import _sample_picker

    x = torch.randn(4, 96, 3)
    full = TokenIndex(torch.ones(4, 96, dtype=torch.long))
    assert _sample_picker(full) is _sample_picker(TokenIndex(torch.ones(4, 96, dtype=torch.long)))
    assert torch.equal(_sample_picker(full)(x), x[sample_counted(full.counted)])
    mask = torch.ones(4, 96, dtype=torch.long)
    mask[1, 50:] = 0  # padding: sampled from this batch's own mask
    padded = TokenIndex(mask)
    assert torch.equal(_sample_picker(padded)(x), x[sample_counted(padded.counted)])


def test_the_check_computes_on_the_pieces_device():
    """Every tensor of the check is made on the pieces' device (a GPU, each device of a dispatched model):
    on the meta device, where a CPU tensor among them is an error, it runs to the one place a value is
    read."""
    from tlm_probe.capture.adapters import SEQUENTIAL
    from tlm_probe.capture.guardrails import AdditivityChecks

    raw = {k: v.to("meta") for k, v in _sequential_pieces(torch.Generator().manual_seed(5)).items()}
    checks = AdditivityChecks(SEQUENTIAL, {})
    checks.add(0, raw, lambda x: x.reshape(-1, x.shape[-1])[:10])
    with pytest.raises(RuntimeError, match="item\\(\\) cannot be called on meta tensors"):
        checks.check()
