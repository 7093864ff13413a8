"""nnterp (its StandardizedTransformer, benchmarks/nnterp_peer.py) beside tlm_probe's capture, on the
project's tiny random models of every family row (test_capture_api.VARIANTS), each side on its own copy of
the model built from the same seed.

- Coverage: which rows nnterp loads (its constructor scans every renamed piece and refuses a model it cannot
  rename); the refusals are recorded with the reason nnterp gives.
- Names: nnterp's `layers_output[l]` is our `resid_post[l]` on every row it loads. Its `mlps_output[l]` is
  the output of the module it renames `mlp`; ours is what the block adds to the residual stream (resid_post =
  resid_mid + mlp_out, proved in test_capture_api). The two agree where the block adds the module's output
  as it is; where they disagree, both are computed by hand here from a plain PyTorch hook on that module (a
  forward without nnsight) and the block's own arithmetic, read from the modeling files (RELATION).

Tolerances: the same float32 operations in the same order on identical weights give bit-identical values
(measured: 0 on every agreeing row); the hand relations redo one operation (a subtraction, a scale, a norm)
on values below 10, a few float32 eps (1.2e-7) of them: 1e-5 absolute + 1e-5 relative leaves a factor 10,
while each disagreement is above 1% of the largest value.
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from families_zoo import ENCODERS
from models_zoo import _causal_tokenizer, _encoder_tokenizer
from test_capture_api import VARIANTS, build

import tlm_probe as tp
from benchmarks import nnterp_peer
from tlm_probe.capture.native import first_tensor

TOL = dict(rtol=1e-5, atol=1e-5)
B, T_LEN = 2, 12

REFUSED = {
    "bert": "not a text-generation model", "roberta": "not a text-generation model",
    "bert_chunked": "not a text-generation model", "distilbert": "not a text-generation model",
    "modernbert": "not a text-generation model", "t5": "not a text-generation model",
    "t5_decoder": "no layers found (a T5 model: encoder and decoder stacks)",
    "phi": "no ln_final found (Phi's final_layernorm is not among its names)",
    "opt_post_ln": "no ln_final found (post-LN OPT has no final norm)",
    "mamba": "no layers found (backbone.layers is not among its names)",
    "tlm": "not a transformers model",
}
"""What nnterp 1.3.0 refuses at its default settings (a RenameConfig may name the missing modules)."""
COVERED = tuple(v for v in VARIANTS if v not in REFUSED)


def _module_out(out, layer, cache, l):
    return out


def _scaled(out, layer, cache, l):  # Granite: hidden = residual + mlp(x) * residual_multiplier
    return out * layer.residual_multiplier  # 0.5 in families_zoo


def _post_norm(out, layer, cache, l):  # Gemma 2/3, OLMo 2: residual + post_feedforward_layernorm(mlp(x))
    return layer.post_feedforward_layernorm(out)


def _minus_residual(out, layer, cache, l):  # BLOOM: BloomMLP returns dropout_add(dense_4h_to_h(..), residual)
    return out - cache["resid_mid", l]


def _plus_attention(out, layer, cache, l):  # Falcon parallel: `mlp_output += attention_output` in place
    return out + cache["attn_out", l]


RELATION = {  # variant -> (our mlp_out from the module's output, nnterp's mlps_output from it)
    "granite": (_scaled, _module_out),
    "gemma2": (_post_norm, _module_out),
    "gemma3_text": (_post_norm, _module_out),
    "olmo2": (_post_norm, _module_out),
    "bloom": (_minus_residual, _module_out),
    "falcon_parallel": (_module_out, _plus_attention),
    "falcon_new": (_module_out, _plus_attention),
}


@pytest.fixture(scope="module", autouse=True)
def _quiet():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    logging.getLogger("nnterp").setLevel(logging.ERROR)  # its scan falls back to a trace on MoE: a warning
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def loaded() -> dict:
    return {}  # variant -> its StandardizedTransformer, or what nnterp raised


def _standardized(loaded: dict, variant: str):
    if variant not in loaded:
        try:
            loaded[variant] = _load(variant)
        except Exception as e:  # noqa: BLE001 - whatever nnterp raises is its refusal
            loaded[variant] = e
    if isinstance(loaded[variant], Exception):
        raise loaded[variant]
    return loaded[variant]


def _load(variant: str):
    tokenizer = _encoder_tokenizer if variant in (*ENCODERS, "bert", "roberta") else _causal_tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nnterp_peer.standardized(build(variant), tokenizer())


def _ids() -> torch.Tensor:
    return torch.randint(5, 60, (B, T_LEN), generator=torch.Generator().manual_seed(3))


def test_coverage_table(loaded):
    """nnterp loads exactly the rows not in REFUSED; printed as the table the docs quote."""
    table = {}
    for v in VARIANTS:
        try:
            _standardized(loaded, v)
            table[v] = "loads"
        except Exception as e:  # noqa: BLE001 - whatever nnterp raises is its refusal
            table[v] = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
    print("\n".join(f"{v:18s} {r}" for v, r in table.items()))
    loaded = {v for v, r in table.items() if r == "loads"}
    assert loaded == set(COVERED), {v: table[v] for v in loaded ^ set(COVERED)}


def _hand_mlp(st, ids) -> list[torch.Tensor]:
    """The output of the module nnterp calls `mlp` in each layer, cloned when it returns, from a plain
    forward of the wrapped model with a plain PyTorch hook (no nnsight tracing)."""
    outs, handles = [], []
    for l in range(st.num_layers):
        module = st.layers[l].mlp._module
        handles.append(module.register_forward_hook(lambda m, a, o: outs.append(first_tensor(o).clone())))
    try:
        with torch.no_grad():
            st._module(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return outs


@pytest.mark.parametrize("variant", COVERED)
def test_names_and_values(variant, loaded):
    st, ids = _standardized(loaded, variant), _ids()
    ours = tp.load(build(variant)).run_with_cache(ids)
    theirs = nnterp_peer.capture(st, ids, torch.ones_like(ids))
    for l in range(st.num_layers):
        torch.testing.assert_close(theirs["layers_output"][l], ours["resid_post", l], **TOL)
    if not nnterp_peer.has_mlp(st):
        assert variant == "opt"  # nnterp's get_ignores: OPT's fc1/fc2 sit in the layer, no mlp module
        return
    hand = _hand_mlp(st, ids)
    to_ours, to_theirs = RELATION.get(variant, (_module_out, _module_out))
    for l in range(st.num_layers):
        layer, mlp = st.layers[l]._module, theirs["mlps_output"][l]
        with torch.no_grad():
            torch.testing.assert_close(mlp, to_theirs(hand[l], layer, ours, l), **TOL)
            torch.testing.assert_close(ours["mlp_out", l], to_ours(hand[l], layer, ours, l), **TOL)
        gap = float((mlp - ours["mlp_out", l]).abs().max() / ours["mlp_out", l].abs().max())
        assert (gap > 1e-2) == (variant in RELATION), gap  # the names disagree by > 1% exactly there
