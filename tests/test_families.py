"""Every family of issue 20 on a tiny random model, every backend, against an independent reference.

The reference knows nothing of the adapter table: it runs each layer of a float64 copy of the model on
one unpadded sequence at a time, with the arguments the layer really received, and reads each sublayer's
contribution off the *layer output* under interventions written here from the modeling files:
- sequential blocks: the MLP's output zeroed gives resid_mid (the stream the MLP adds to); then
  mlp_out = resid_post - resid_mid and attn_out = resid_mid - resid_pre;
- parallel blocks: the MLP zeroed gives resid_pre + attn_out, the attention zeroed resid_pre + mlp_out;
- post-LN blocks: with the second LayerNorm an identity the layer returns resid_mid + mlp_out (and
  resid_mid when the MLP is zeroed too); with the first one an identity as well, resid_pre + attn_out.
So a tap one norm off (Gemma 2's post-feedforward norm), a missing multiplier (Granite) or a module that
adds the residual itself (BLOOM) disagrees with the reference. The statistics are the contract's formulas
in float64 on these pieces.

Tolerance: the probe runs in float32; its pieces carry relative errors of a few float32 eps (1.2e-7) per
operation through 3 layers of width 32, and cosines / norm ratios of O(1) values inherit about the same:
measured below 1e-6 (the table in the report). 1e-5 leaves a factor 10 for other CPU kernels while a wrong
tap moves the statistics by 1e-2 or more.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from families_zoo import ENCODERS, FAMILY_MODELS, build_family
from models_zoo import CORPUS
from test_probe_reference import _stats  # the independent float64 per-token statistics

from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model, wrap_model
from tlm_probe.capture.guardrails import GuardrailError
from tlm_probe.capture.native import first_tensor
from tlm_probe.data.sequences import token_sequences
from tlm_probe.errors import UserError
from tlm_probe.probe.engine import ProbeOptions, run_probe

TEXTS = CORPUS
SEQ_LEN = 16
BACKENDS = ("native", "nnsight", "transformer-lens")
TOL = 1e-5
MAX_DIFF: dict[tuple[str, str], float] = {}  # (variant, backend) -> max |probe - reference|

# variant -> (block kind, modules the reference intervenes on), read from transformers' modeling files
SEQ = ("sequential", {"mlp": "mlp"})
PAR = ("parallel", {"attn": "self_attn", "mlp": "mlp"})
REFERENCE_LAYOUT = {
    "phi3": SEQ,
    "starcoder2": SEQ,
    "smollm3": SEQ,
    "stablelm": SEQ,
    "stablelm_parallel": PAR,
    "granite": SEQ,
    "cohere": PAR,
    "phi": PAR,
    "gpt_bigcode": SEQ,
    "codegen": ("parallel", {"attn": "attn", "mlp": "mlp"}),
    "gemma2": SEQ,
    "gemma3_text": SEQ,
    "olmo2": SEQ,
    "bloom": ("sequential", {"mlp": "mlp.dense_4h_to_h"}),  # BloomMLP adds the residual after this
    "falcon_seq": SEQ,
    "falcon_parallel": ("parallel", {"attn": "self_attention", "mlp": "mlp"}),
    "falcon_new": ("parallel", {"attn": "self_attention", "mlp": "mlp"}),
    "opt_post_ln": ("post_ln", {"mlp": "fc2", "ln1": "self_attn_layer_norm", "ln2": "final_layer_norm"}),
    "bert_chunked": (
        "post_ln",
        {"mlp": "output.dense", "ln1": "attention.output.LayerNorm", "ln2": "output.LayerNorm"},
    ),
    "distilbert": ("post_ln", {"mlp": "ffn", "ln1": "sa_layer_norm", "ln2": "output_layer_norm"}),
    "modernbert": SEQ,
    "mixtral": SEQ,
    "qwen2_moe": SEQ,
    "qwen3_moe": SEQ,
    "olmoe": SEQ,
    "gpt_oss": SEQ,
    "deepseek_v3": SEQ,
    "mamba": ("mixer_only", {"mixer": "mixer"}),
}
VARIANTS = tuple(FAMILY_MODELS)
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss", "deepseek_v3")


def _zero(module, args, out):
    if isinstance(out, torch.Tensor):
        return torch.zeros_like(out)
    return (torch.zeros_like(out[0]), *out[1:])  # (hidden, router scores): zero the hidden states


def _identity(module, args, out):
    return args[0]


class _Layers:
    """Records each layer's call (args, kwargs) and output during a forward of the reference model."""

    def __init__(self, layers):
        self.layers, self.calls, self.outs = layers, [], []
        self.handles = [l.register_forward_pre_hook(self._pre, with_kwargs=True) for l in layers]
        self.handles += [l.register_forward_hook(self._post) for l in layers]

    def _pre(self, m, args, kwargs):
        self.calls.append((args, kwargs))

    def _post(self, m, args, out):
        self.outs.append(first_tensor(out))

    def remove(self):
        for h in self.handles:
            h.remove()


def _run(layer, call, zero=(), identity=()) -> torch.Tensor:
    hooks = [layer.get_submodule(p).register_forward_hook(_zero) for p in zero]
    hooks += [layer.get_submodule(p).register_forward_hook(_identity) for p in identity]
    try:
        return first_tensor(layer(*call[0], **call[1]))
    finally:
        for h in hooks:
            h.remove()


def _pieces(kind: str, mods: dict, layer, call, post) -> tuple:
    """(resid_pre, attn_out, resid_mid, mlp_out, resid_post) of one layer, from its output alone."""
    args, kwargs = call
    pre = args[0] if args else kwargs["hidden_states"]
    if kind == "sequential":
        mid = _run(layer, call, zero=[mods["mlp"]])
        return pre, mid - pre, mid, post - mid, post
    if kind == "mixer_only":  # no MLP: resid_mid and mlp_out do not exist (their statistics are refused)
        attn = post - _run(layer, call, zero=[mods["mixer"]])
        return pre, attn, post, torch.zeros_like(post), post
    if kind == "parallel":
        attn = _run(layer, call, zero=[mods["mlp"]]) - pre
        mlp = _run(layer, call, zero=[mods["attn"]]) - pre
        assert torch.allclose(pre + attn + mlp, post, atol=1e-10), "reference: not a parallel block"
        return pre, attn, pre + attn, mlp, post
    mid = _run(layer, call, zero=[mods["mlp"]], identity=[mods["ln2"]])
    mlp = _run(layer, call, identity=[mods["ln2"]]) - mid
    attn = _run(layer, call, zero=[mods["mlp"]], identity=[mods["ln1"], mods["ln2"]]) - pre
    return pre, attn, mid, mlp, post


def reference(variant: str, folder) -> dict[tuple[int, str], np.ndarray]:
    """Per (layer, statistic): the per-token values over all sequences, from a float64 copy."""
    auto = FAMILY_MODELS[variant][1]
    kw = {"experts_implementation": "eager"} if variant in MOE else {}  # grouped_mm has no float64
    model = auto.from_pretrained(folder, dtype=torch.float64, **kw).eval()
    if variant == "bert_chunked":  # chunks need seq % chunk == 0; per-token FFN: same numbers whole
        model.config.chunk_size_feed_forward = 0
        for lay in model.encoder.layer:
            lay.chunk_size_feed_forward = 0
    pm = load_probe_model(folder)  # only for its tokenizer's sequences (the same the probe reads)
    layers = model.base_model.get_submodule(pm.adapter.layers)
    values: dict[tuple[int, str], list] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a thread pool on a busy machine costs more than it gives
    try:
        _reference_values(variant, model, pm, layers, values)
    finally:
        torch.set_num_threads(threads)
    return {k: np.concatenate(v) for k, v in values.items()}


def _reference_values(variant, model, pm, layers, values, layout=None, texts=TEXTS) -> None:
    """Fill values[(layer, statistic)] with per-sequence arrays; layout defaults to the variant's."""
    kind, mods = layout or REFERENCE_LAYOUT[variant]
    with torch.no_grad():
        for seq in token_sequences(texts, SEQ_LEN, pm.tokenizer, pm.vocab_size):
            rec = _Layers(layers)
            try:
                ids, mask = torch.tensor([seq]), torch.ones(1, len(seq), dtype=torch.long)
                # no cache: re-running a layer must not append to the keys it attends over
                model(
                    input_ids=ids,
                    attention_mask=mask,
                    **({} if variant in ENCODERS else {"use_cache": False}),
                )
            finally:
                rec.remove()
            for l, layer in enumerate(layers):
                pieces = _pieces(kind, mods, layer, rec.calls[l], rec.outs[l])
                for name, v in _stats(*pieces).items():
                    values.setdefault((l, name), []).append(v[0].numpy())


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models: one thread is faster than a pool contending for a shared machine's cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """variant -> (folder, reference): each tiny model and its reference built once for the module."""
    root, cache = tmp_path_factory.mktemp("families"), {}

    def get(variant: str):
        if variant not in cache:
            folder = build_family(variant, root / variant)
            cache[variant] = (folder, reference(variant, folder))
        return cache[variant]

    return get


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_family_matches_independent_reference(built, variant, backend):
    folder, ref = built(variant)
    pm = load_probe_model(folder)  # a fresh load per backend: the bridge switches attention to eager
    refusal = pm.adapter.tl_refusal
    if backend == "transformer-lens" and refusal and refusal(pm.model.config):
        with pytest.raises(UserError, match="TransformerLens backend cannot probe"):
            probe(pm, TEXTS, backend=backend, seq_len=SEQ_LEN, batch_size=3, max_tokens=None)
        return
    df = probe(pm, TEXTS, backend=backend, seq_len=SEQ_LEN, batch_size=3, max_tokens=None)
    worst = 0.0
    for row in df.itertuples():
        expect = ref[(row.layer, row.statistic)]
        assert row.n_tokens == expect.size
        worst = max(worst, abs(row.value - expect.mean()))
    MAX_DIFF[(variant, backend)] = worst
    print(f"max |probe - reference| {variant} {backend}: {worst:.1e}")  # the report's table (pytest -s)
    assert worst <= TOL, (variant, backend, worst)
    assert list(df.groupby("layer").d_ff.first()) == list(pm.d_ff)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in ENCODERS])
def test_final_map_and_head_reproduce_the_logits(built, variant):
    """The row's final norm (or OPT-350m's project_out) and head, applied to the last block's output."""
    folder, _ = built(variant)
    pm = load_probe_model(folder)
    ids = torch.tensor([list(range(3, 3 + SEQ_LEN))])
    last = {}
    hook = pm.layer(pm.n_layers - 1).register_forward_hook(lambda m, a, o: last.update(x=first_tensor(o)))
    with torch.no_grad():
        logits = pm.model(input_ids=ids).logits
        hook.remove()
        final = pm.final_norm() or torch.nn.Identity()
        again = pm.lm_head()(final(last["x"]))
    assert torch.allclose(again, logits, atol=1e-5), float((again - logits).abs().max())


# a row changed on purpose: (variant, what to change) -> the guardrail must refuse the model
BROKEN_ROWS = {
    "gemma2 mlp_out before its post-feedforward norm": ("gemma2", {"mlp_out": "mlp:out"}),
    "gemma2 attn_out before its post-attention norm": ("gemma2", {"attn_out": "self_attn:out"}),
    "olmo2 mlp_out before its post-feedforward norm": ("olmo2", {"mlp_out": "mlp:out"}),
    "bloom mlp_out with the residual BloomMLP adds": ("bloom", {"mlp_out": "mlp:out"}),
    "granite without residual_multiplier": ("granite", "no scale"),
    "falcon parallel without the copy of mlp_out": ("falcon_parallel", "no copy"),
}


def _break(pm, change) -> None:
    if change == "no scale":
        pm.scales = {}
    elif change == "no copy":
        pm.adapter = dataclasses.replace(pm.adapter, copy=frozenset())
    else:
        taps = {k: {**v, **change} for k, v in pm.adapter.taps.items()}
        pm.adapter = dataclasses.replace(pm.adapter, taps=taps)


@pytest.mark.parametrize("backend", ("native", "nnsight"))
@pytest.mark.parametrize("case", list(BROKEN_ROWS))
def test_a_row_changed_on_purpose_is_refused(built, case, backend):
    variant, change = BROKEN_ROWS[case]
    folder, _ = built(variant)
    pm = load_probe_model(folder)
    probe(pm, TEXTS, backend=backend, seq_len=SEQ_LEN, max_tokens=64)  # the right row passes
    _break(pm, change)
    with pytest.raises(GuardrailError, match="is not"):
        probe(pm, TEXTS, backend=backend, seq_len=SEQ_LEN, max_tokens=64)


# d_ff per layer from each config's own numbers: dense layers intermediate_size, MoE layers
# top_k x expert width + shared expert width
MOE_WIDTHS = {
    "mixtral": (160, 160, 160),
    "qwen2_moe": (2 * 24 + 40, 80, 2 * 24 + 40),  # layer 1 is in mlp_only_layers: a dense MLP
    "qwen3_moe": (48, 48, 48),
    "olmoe": (160, 160, 160),
    "gpt_oss": (48, 48, 48),
    "deepseek_v3": (80, 2 * 24 + 24, 2 * 24 + 24),  # first_k_dense_replace=1; one shared expert of 24
}


@pytest.mark.parametrize("variant", list(MOE_WIDTHS))
def test_moe_widths_and_neuron_statistics_refused_with_the_reason(built, variant):
    folder, _ = built(variant)
    pm = load_probe_model(folder)
    assert pm.d_ff == MOE_WIDTHS[variant]
    result = run_probe(
        pm,
        ProbeOptions(
            data=TEXTS,
            stats="align_mlp_mid,dead_neuron_frac,stable_rank_mlp_out",
            seq_len=SEQ_LEN,
            max_tokens=64,
        ),
    )
    skipped = result.provenance["importance"]["skipped"]
    assert set(skipped) == {"dead_neuron_frac", "stable_rank_mlp_out"}
    assert all("mixture-of-experts" in why for why in skipped.values())
    assert set(result.table.statistic) == {"align_mlp_mid"}
    layers = result.provenance["architecture"]["adapter"]["mlp_layers"]
    moe = [m for m in layers if m["kind"] == "moe"]
    assert moe and all(m["d_ff"] == m["top_k"] * m["expert_width"] + sum(m["shared_widths"]) for m in moe)


def test_lens_refused_where_the_model_transforms_its_logits(built):
    folder, _ = built("gemma2")
    opts = ProbeOptions(data=TEXTS, stats="logit_lens_kl", seq_len=SEQ_LEN, max_tokens=64)
    assert set(run_probe(load_probe_model(folder), opts).table.statistic) == {"logit_lens_kl"}
    pm = load_probe_model(folder)
    pm.model.config.final_logit_softcapping = 30.0  # Gemma 2's default: logits = 30 tanh(x / 30)
    pm = wrap_model(pm.model, pm.tokenizer)
    result = run_probe(pm, opts)
    assert result.table.empty
    assert "soft-capped" in result.provenance["importance"]["skipped"]["logit_lens_kl"]


def test_an_unsupported_folder_is_refused_before_heavy_imports(tmp_path):
    """The refusal once took 7-11 s, almost all imports: now the table is read from config.json alone."""
    (tmp_path / "config.json").write_text('{"model_type": "rwkv"}')
    code = (
        "import sys\n"
        "from tlm_probe.capture.adapters import check_folder\n"
        "from tlm_probe.errors import UserError\n"
        f"try:\n    check_folder({str(tmp_path)!r})\nexcept UserError as e:\n    print(e)\n"
        "heavy = ('torch', 'transformers', 'transformer_lens', 'nnsight')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "unsupported architecture 'rwkv'" in out
    assert out.strip().endswith("[]"), out


def test_a_block_without_mlp_gives_block_level_statistics_only(built):
    folder, _ = built("mamba")
    opts = ProbeOptions(data=TEXTS, stats="alignment", seq_len=SEQ_LEN, max_tokens=64)
    result = run_probe(load_probe_model(folder), opts)
    assert set(result.table.statistic) == {"block_influence", "resid_norm_growth"}
    assert set(result.table.d_ff) == {0}
    refused = result.provenance["refused"]
    assert "align_mlp_mid" in refused and all("no MLP" in why for why in refused.values())
    with pytest.raises(UserError, match="none of the asked statistics can be computed"):
        run_probe(load_probe_model(folder), replace(opts, stats="align_mlp_mid,taylor_mlp"))
